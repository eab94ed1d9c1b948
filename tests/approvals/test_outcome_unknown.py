"""A worker died between a non-idempotent call and its record: a person says what happened."""

import pytest

from approvals import decisions
from approvals.decisions import DecisionInvalid
from approvals.models import Approval
from runs.engine import ledger
from runs.models import Run, SideEffect, Step

from .conftest import EXECUTED, drive, launch

pytestmark = pytest.mark.django_db(transaction=True)


def _crash_after_the_call(monkeypatch) -> None:
    """The call happens, then recording its result fails once (as if the worker died)."""
    real = ledger.record_tool_result
    crashed = []

    def record(work, item, **kwargs):
        if item["name"] == "test_notify" and kwargs.get("ledger") is not None and not crashed:
            crashed.append(True)
            raise RuntimeError("worker lost")
        return real(work, item, **kwargs)

    monkeypatch.setattr(ledger, "record_tool_result", record)


def _asked(operator, monkeypatch) -> tuple[Run, Approval]:
    _crash_after_the_call(monkeypatch)
    run = launch("test-notifier", {"to": "ops", "amount": "1"}, by=operator)
    assert drive(run) == "requeued"  # the crash: recorded, run re-queued
    assert EXECUTED == [("test_notify", {"to": "ops"})]
    assert drive(run) == Run.Status.WAITING
    approval = Approval.objects.get(run=run, status=Approval.Status.PENDING)
    assert approval.kind == Approval.Kind.QUESTION and approval.side_effect is not None
    assert approval.options == ["happened", "did_not_happen"]
    return run, approval


def test_happened_records_the_effect_without_calling_again(
    operator, approver, no_enqueue, monkeypatch
):
    run, approval = _asked(operator, monkeypatch)
    with pytest.raises(DecisionInvalid):
        decisions.decide(approval.pk, user=approver, decision="reject", reason="no idea")

    decisions.decide(approval.pk, user=approver, decision="answer", answer="happened")

    assert drive(run) == Run.Status.SUCCEEDED
    assert len(EXECUTED) == 1
    effect = SideEffect.objects.get(run=run)
    assert effect.status == SideEffect.Status.COMMITTED
    tool_step = run.steps.filter(kind=Step.Kind.TOOL).last()
    assert tool_step.data["result"]["confirmed_by"] == "arthur"


def test_did_not_happen_runs_the_call_again_once(operator, approver, no_enqueue, monkeypatch):
    run, approval = _asked(operator, monkeypatch)

    decisions.decide(approval.pk, user=approver, decision="answer", answer="did_not_happen")

    assert drive(run) == Run.Status.SUCCEEDED
    assert EXECUTED == [("test_notify", {"to": "ops"})] * 2
    assert SideEffect.objects.get(run=run).status == SideEffect.Status.COMMITTED


def test_an_edited_call_is_retried_with_the_approved_arguments(
    operator, approver, no_enqueue, monkeypatch
):
    _crash_after_the_call(monkeypatch)
    run = launch(
        "test-notifier",
        {"to": "ops", "amount": "1"},
        by=operator,
        never_gate=[],
        always_gate=["test_notify"],
    )
    assert drive(run) == Run.Status.WAITING
    gate = Approval.objects.get(run=run)
    decisions.decide(gate.pk, user=approver, decision="approve", arguments={"to": "oncall"})
    assert drive(run) == "requeued"  # crashed after the call
    assert drive(run) == Run.Status.WAITING
    question = Approval.objects.get(run=run, status=Approval.Status.PENDING)

    decisions.decide(question.pk, user=approver, decision="answer", answer="did_not_happen")

    assert drive(run) == Run.Status.SUCCEEDED
    # Both attempts are the approved call; the proposed one never runs.
    assert EXECUTED == [("test_notify", {"to": "oncall"})] * 2
    tool_step = run.steps.filter(kind=Step.Kind.TOOL).last()
    assert tool_step.data["args"] == {"to": "oncall"}
