"""Replay: a recorded run re-run with its recorded model turns, tool results and decisions,
with no model call, no tool call and nothing written that stays."""

import dataclasses

import pytest

from agentops.tools import REGISTRY
from approvals import decisions
from approvals.models import Approval
from demo.models import Refund
from history.replay import replay
from runs import engine
from runs.models import Run, SideEffect, Step
from tests.demo.test_demo_flows import launch_default

pytestmark = pytest.mark.django_db


def approved_refund(operator, approver) -> Run:
    """The demo's gated refund, approved twice (the refund, then the e-mail)."""
    run = launch_default("refund-desk", operator)
    for _ in range(2):
        assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
        approval = Approval.objects.get(run=run, status=Approval.Status.PENDING)
        decisions.decide(approval.pk, user=approver, decision="approve")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    return run


def test_a_gated_run_replays_identically_with_no_side_effect(
    operator, approver, no_enqueue, monkeypatch, django_capture_on_commit_callbacks
):
    run = approved_refund(operator, approver)
    before = {
        "runs": Run.objects.count(),
        "steps": Step.objects.count(),
        "ledger": list(SideEffect.objects.values_list("key", "status")),
        "refunds": Refund.objects.count(),
        "approvals": Approval.objects.count(),
    }
    called = []
    for name in ("lookup_order", "issue_refund", "send_customer_email"):
        tool = REGISTRY[name]
        monkeypatch.setitem(
            REGISTRY, name, dataclasses.replace(tool, fn=lambda *a, **k: called.append(a))
        )

    with django_capture_on_commit_callbacks() as on_commit:
        result = replay(run)

    run.refresh_from_db()
    assert result.identical, result.summary
    assert result.compared == run.last_seq == result.recorded_steps
    assert called == []
    after = {
        "runs": Run.objects.count(),
        "steps": Step.objects.count(),
        "ledger": list(SideEffect.objects.values_list("key", "status")),
        "refunds": Refund.objects.count(),
        "approvals": Approval.objects.count(),
    }
    assert after == before
    # Nothing waits for a commit: no live event, no queue message, no notification.
    assert on_commit == []
