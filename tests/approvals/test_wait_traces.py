"""An approval that expires is a wait span too, its decision "expired", from the gate to
the expiry (approvals/wait_traces.py)."""

import pytest
from django.utils import timezone

from agentkit import tracing
from approvals import decisions
from approvals.models import Approval

from .conftest import gated

pytestmark = pytest.mark.django_db(transaction=True)

BIG = {"to": "acme", "amount": "800.00"}  # over the 500 threshold: gated


def test_an_expired_approval_is_a_wait_that_ended_expired(traces, operator, no_enqueue):
    run, approval = gated("test-payer", BIG, by=operator)
    Approval.objects.filter(pk=approval.pk).update(expires_at=timezone.now())
    assert decisions.expire_due() == 1
    (wait,) = [s for s in traces.get_finished_spans() if s.name == "approval action"]
    assert wait.attributes["agentops.approval.decision"] == "expired"
    assert wait.attributes["agentops.approval.decided_by"] == ""
    assert wait.parent.span_id == tracing.parse(run.traceparent).span_id
    assert wait.end_time > wait.start_time
