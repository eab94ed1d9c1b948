"""What a compensation came to, as the operator is told it: a compensating call that ran and
failed is settled failed (never "made"), and several effects are undone newest first, the
reverse of the order they were done (runs/compensation/models.py `_settle_one`, `_chosen`)."""

from dataclasses import replace

import pytest

from agentkit.tools import REGISTRY, ToolError
from approvals import decisions
from approvals.models import Approval
from demo.models import Refund
from runs import engine
from runs.compensation import models as compensation
from runs.models import Compensation, Run, SideEffect

from ..demo.test_exchange_desk import failed_after_refund

pytestmark = pytest.mark.django_db


@pytest.fixture
def failed(operator, approver, no_enqueue) -> Run:
    return failed_after_refund("exchange-desk", operator, approver)


def _approve_and_finish(child: Run, approver) -> str:
    assert engine.advance(child.pk, time_slice=30) == Run.Status.WAITING
    gate = Approval.objects.get(run=child, status=Approval.Status.PENDING)
    decisions.decide(gate.pk, user=approver, decision="approve")
    return engine.advance(child.pk, time_slice=30)


def test_a_compensating_call_that_ran_and_failed_is_settled_failed(
    failed, operator, approver, monkeypatch
):
    def refused(**kwargs):
        raise ToolError("the payment provider refuses: refund already paid out")

    monkeypatch.setitem(REGISTRY, "reverse_refund", replace(REGISTRY["reverse_refund"], fn=refused))
    [comp] = compensation.request(failed, None, by=operator)
    child = comp.compensating_run
    assert _approve_and_finish(child, approver) == Run.Status.FAILED
    # The call ran (approved, through the ledger) and its outcome is a failure.
    effect = SideEffect.objects.get(key=comp.key)
    assert effect.status == SideEffect.Status.FAILED
    assert [c.pk for c in compensation.settle(child.pk)] == [comp.pk]
    comp.refresh_from_db()
    assert comp.status == Compensation.Status.FAILED
    assert comp.detail != "made" and "refund already paid out" in comp.detail
    assert Refund.objects.get(run_id=failed.pk).reversed_at is None
    # The origin's timeline tells the operator the refund was not undone.
    step = failed.steps.filter(data__event=compensation.SETTLED).get()
    assert step.data["outcome"] == Compensation.Status.FAILED


def test_a_compensating_call_that_committed_is_settled_made(failed, operator, approver):
    [comp] = compensation.request(failed, None, by=operator)
    assert _approve_and_finish(comp.compensating_run, approver) == Run.Status.SUCCEEDED
    compensation.settle(comp.compensating_run.pk)
    comp.refresh_from_db()
    assert (comp.status, comp.detail) == (Compensation.Status.COMPENSATED, "made")


def _second_refund(run: Run) -> SideEffect:
    """Another committed refund of the run, made after the first."""
    first = run.side_effects.get(tool="issue_refund")
    refund = Refund.objects.get(run_id=run.pk)
    other = Refund.objects.create(
        run_id=run.pk, order_id=refund.order_id, amount=refund.amount, idempotency_key="second"
    )
    result = {**first.result, "result": {**first.result["result"], "refund_id": other.pk}}
    return SideEffect.objects.create(
        key="b" * 64,
        run=run,
        step_seq=first.step_seq,
        tool=first.tool,
        args={**first.args, "amount": str(refund.amount)},
        status=SideEffect.Status.COMMITTED,
        result=result,
    )


@pytest.mark.parametrize("asked", ["every one", "oldest named first"])
def test_effects_are_compensated_newest_first(failed, operator, asked):
    older = failed.side_effects.get(tool="issue_refund")
    newer = _second_refund(failed)
    assert newer.pk > older.pk
    ids = None if asked == "every one" else [older.pk, newer.pk]
    comps = compensation.request(failed, ids, by=operator)
    assert [c.effect_id for c in comps] == [newer.pk, older.pk]
    # The compensation run makes its calls in that order.
    launched = comps[0].compensating_run.steps.get(seq=1).data["compensates"]
    assert [item["effect"] for item in launched] == [newer.pk, older.pk]
