"""Plans approved once, end to end in the engine: the planning refund desk submits its plan,
an approver decides it once, the calls that follow it run without a new gate (but the
high-risk refund still gets its own), and the call it did not plan is gated again."""

import pytest

from agentkit.agents import CATALOGUE
from approvals import decisions, plans
from approvals.models import Approval, Plan
from runs.models import Run, Step

from .conftest import drive, launch

pytestmark = pytest.mark.django_db

INPUT = {"order_id": 13, "amount": "40.00", "reason": "Arrived damaged"}


def pending(run: Run) -> Approval:
    return Approval.objects.get(run=run, status=Approval.Status.PENDING)


def test_smoke(bea, no_enqueue):
    run = launch("planned-refund-desk", INPUT)
    assert drive(run) == Run.Status.WAITING
    plan_approval = pending(run)
    assert plan_approval.kind == Approval.Kind.PLAN
    decisions.decide(plan_approval.pk, user=bea, decision="approve")
    status = drive(run)
    print(status, list(run.steps.values_list("seq", "kind", "data")))
    print([(a.tool, a.status, a.explanation) for a in Approval.objects.filter(run=run)])
    refund = pending(run)
    decisions.decide(refund.pk, user=bea, decision="approve")
    status = drive(run)
    print(status, [(a.tool, a.status, a.explanation) for a in Approval.objects.filter(run=run).order_by("gate_seq")])
    for t in plans.todo(run):
        print(t.state, [(r.number, r.tool, r.status, r.detail) for r in t.rows], t.deviations)
