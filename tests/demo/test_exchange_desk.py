"""The exchange-desk demo (compensation after a partial failure): the refund commits, the
replacement's dispatch is refused and the run fails; the refund's reversal, asked by an
operator or by the agent's own declaration, is gated, made once through the ledger, and
recorded beside the refund."""

from decimal import Decimal

import pytest

from approvals import decisions
from approvals.models import Approval
from demo.models import Refund
from runs import engine
from runs.compensation import effects as compensable
from runs.compensation import models as compensation
from runs.models import Compensation, Run, SideEffect, Step

from .test_demo_flows import launch_default

pytestmark = pytest.mark.django_db


def failed_after_refund(slug: str, operator, approver) -> Run:
    """A run of `slug` whose refund was approved and made, and whose dispatch then failed."""
    run = launch_default(slug, operator)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    approval = Approval.objects.get(run=run, status=Approval.Status.PENDING)
    assert approval.tool == "issue_refund"
    decisions.decide(approval.pk, user=approver, decision="approve")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.FAILED
    run.refresh_from_db()
    assert run.termination_reason == Run.Termination.CONSECUTIVE_ERRORS
    return run


def test_an_operator_compensates_the_refund_through_its_gate(operator, approver, no_enqueue):
    run = failed_after_refund("exchange-desk", operator, approver)
    refund = Refund.objects.get(run_id=run.pk)
    [shown] = compensable.effects(run)
    assert (shown.effect.tool, shown.compensate_tool, shown.state) == (
        "issue_refund",
        "reverse_refund",
        "not compensated",
    )

    [comp] = compensation.request(run, [shown.effect.pk], by=operator)
    child = comp.compensating_run
    assert (child.trigger, child.parent_id, comp.args) == (
        Run.Trigger.COMPENSATION,
        run.pk,
        {"refund_id": refund.pk, "reason": "compensation of the refund on order 13"},
    )
    # Gated like any call of its kind (irreversible, high): nothing is reversed yet.
    assert engine.advance(child.pk, time_slice=30) == Run.Status.WAITING
    gate = Approval.objects.get(run=child, status=Approval.Status.PENDING)
    assert gate.tool == "reverse_refund"
    # The approver is told what it undoes, and who asked (no model turn proposed it).
    assert gate.context_summary == (
        f"Compensation asked by olivia: it undoes effect #{shown.effect.pk} of run {run.pk} "
        "(failed), Refund 40.00 on order 13."
    )
    refund.refresh_from_db()
    assert refund.reversed_at is None

    decisions.decide(gate.pk, user=approver, decision="approve")
    assert engine.advance(child.pk, time_slice=30) == Run.Status.SUCCEEDED
    refund.refresh_from_db()
    assert refund.reversed_at is not None
    effect = SideEffect.objects.get(key=comp.key)
    assert (effect.run_id, effect.status) == (child.pk, SideEffect.Status.COMMITTED)
    # No model call: the compensation run made its one call and ended.
    child.refresh_from_db()
    assert child.step_count == 0

    compensation.settle(child.pk)
    comp.refresh_from_db()
    assert comp.status == Compensation.Status.COMPENSATED
    assert comp.result["reversed"] is True
    events = [s.data["event"] for s in run.steps.filter(kind=Step.Kind.OPERATOR).order_by("seq")]
    assert events == [compensation.REQUESTED, compensation.SETTLED]
    run.refresh_from_db()
    assert run.verify_chain() == (True, None)
    assert compensable.effects(run)[0].state == "compensated"
    assert Decimal(str(refund.amount)) == Decimal("40.00")
