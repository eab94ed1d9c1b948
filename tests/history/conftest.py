"""Fixtures of the history tests: a recorded demo run to fork, replay, export and import."""

import pytest

from approvals import decisions
from approvals.models import Approval
from runs import engine
from runs.models import Run
from tests.demo.test_demo_flows import launch_default


@pytest.fixture
def refunded(operator, approver, no_enqueue) -> Run:
    """The demo refund run through: lookup, gated refund approved, gated e-mail approved."""
    run = launch_default("refund-desk", operator)
    for _ in range(2):
        assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
        approval = Approval.objects.get(run=run, status=Approval.Status.PENDING)
        decisions.decide(approval.pk, user=approver, decision="approve")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    run.refresh_from_db()
    return run
