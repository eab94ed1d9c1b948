"""Plans approved once, in the engine: the planning refund desk (demo/planning_agent.py)
submits its plan, an approver decides it once, the calls that follow it run without a new
gate (the high-risk refund still gets its own), the call it did not plan is gated again and
says why, and the audit has the plan, the decision and each match or deviation."""

from dataclasses import replace

import pytest
from django import forms

from agentkit.agents import CATALOGUE, register
from agentkit.llm.scripted import tool_use
from approvals import decisions
from approvals.models import Approval, Plan
from approvals.plans import models as plans
from runs.models import Run, Step

from .conftest import EXECUTED, _agent, _report, drive, launch

pytestmark = pytest.mark.django_db

INPUT = {"order_id": 13, "amount": "40.00", "reason": "Arrived damaged"}


def pending(run: Run) -> Approval:
    return Approval.objects.get(run=run, status=Approval.Status.PENDING)


def planned(no_enqueue) -> tuple[Run, Approval]:
    run = launch("planned-refund-desk", INPUT)
    assert drive(run) == Run.Status.WAITING
    return run, pending(run)


def statuses(run: Run) -> list[str]:
    return [row.status for row in plans.todo(run)[0].rows]


def test_an_approved_plan_runs_its_steps_and_gates_what_it_did_not_plan(bea, no_enqueue):
    run, plan_approval = planned(no_enqueue)
    assert plan_approval.kind == Approval.Kind.PLAN
    plan = Plan.objects.get(approval=plan_approval)
    assert [s["tool"] for s in plan.steps] == [
        "lookup_order",
        "issue_refund",
        "send_customer_email",
    ]
    assert statuses(run) == ["pending", "pending", "pending"]
    assert plans.todo(run)[0].state == "proposed"

    decisions.decide(plan_approval.pk, user=bea, decision="approve")
    assert drive(run) == Run.Status.WAITING
    # The lookup followed the plan: approved by it, nobody asked.
    lookup = Approval.objects.get(run=run, tool="lookup_order")
    assert lookup.status == Approval.Status.APPROVED and lookup.decided_by is None
    assert lookup.reason == f"allowed by plan #{plan.pk} step 1 (approved by bea)"
    # The refund is step 2, but high-risk: it waits for its own approval, and says so.
    refund = pending(run)
    assert refund.tool == "issue_refund"
    assert refund.explanation.startswith(f"step 2 of plan #{plan.pk} (issue_refund), but a high")
    assert "the plan does not cover it" in refund.explanation
    assert statuses(run) == ["done", "in progress", "pending"]

    decisions.decide(refund.pk, user=bea, decision="approve")
    assert drive(run) == Run.Status.WAITING
    # The e-mail (gated by policy: it cannot be undone) is covered by the plan...
    email = Approval.objects.get(run=run, tool="send_customer_email", decided_at__isnull=False)
    assert email.status == Approval.Status.APPROVED and email.decided_by is None
    assert email.explanation.endswith(
        "without it: irreversible, blast radius medium: cannot be undone"
    )
    # ...and the second e-mail, which it did not plan, is gated again with the reason.
    copy = pending(run)
    assert copy.args["to"] == "support@example.com"
    assert copy.explanation.startswith(
        f"deviates from plan #{plan.pk}: more calls than planned: send_customer_email was "
        "planned 1 time(s), and step 3 is already taken"
    )
    assert statuses(run) == ["done", "done", "done"]
    deviation = plans.todo(run)[0].deviations[0]
    assert deviation["kind"] == "more_calls" and deviation["decision"] == "pending"

    decisions.decide(copy.pk, user=bea, decision="reject", reason="support reads the ledger")
    assert drive(run) == Run.Status.SUCCEEDED
    assert plans.todo(run)[0].deviations[0]["decision"] == "rejected"

    # The audit: the plan's gate and decision, each match, the deviation, in the chained log.
    gates = list(run.steps.filter(kind=Step.Kind.GATE).order_by("seq"))
    assert gates[0].data["plan_submitted"] is True
    assert [g.data.get("plan_step") for g in gates[1:]] == [1, 2, 3, None]
    assert gates[1].data["allowed_by_plan"].startswith(f"allowed by plan #{plan.pk} step 1")
    assert gates[-1].data["deviation"] == "more_calls"
    decided = run.steps.filter(kind=Step.Kind.DECISION, data__kind="plan").get()
    assert decided.data["by"] == "bea" and decided.data["status"] == "approved"
    tools = run.steps.filter(kind=Step.Kind.TOOL).order_by("seq")
    assert [t.data.get("plan_step") for t in tools] == [
        None,  # submit_plan itself
        f"{plan.pk}:1",
        f"{plan.pk}:2",
        f"{plan.pk}:3",
        None,  # the rejected deviation
    ]
    assert run.verify_chain() == (True, None)


def test_the_calls_are_matched_against_the_plan_as_edited(bea, no_enqueue):
    run, plan_approval = planned(no_enqueue)
    edited = {**plan_approval.args, "steps": [dict(s) for s in plan_approval.args["steps"]]}
    edited["steps"][1] = {
        **edited["steps"][1],
        "envelope": [
            {"arg": "order_id", "op": "eq", "value": 13},
            {"arg": "amount", "op": "lte", "value": "25"},
        ],
    }
    decided = decisions.decide(plan_approval.pk, user=bea, decision="approve", arguments=edited)
    assert decided.edited_args is not None
    assert drive(run) == Run.Status.WAITING
    refund = pending(run)
    # 40.00 is more than the approver allowed: a deviation, with the bound it broke.
    assert refund.explanation.startswith(
        f"deviates from plan #{plan_approval.plan.pk}: step 2 (issue_refund): amount is 40.00, "
        "above the planned 25"
    )
    assert statuses(run) == ["done", "pending", "pending"]


def test_an_edit_that_adds_a_step_is_refused(bea, no_enqueue):
    _run, plan_approval = planned(no_enqueue)
    steps = plan_approval.args["steps"]
    with pytest.raises(decisions.DecisionInvalid) as refused:
        decisions.decide(
            plan_approval.pk,
            user=bea,
            decision="approve",
            arguments={**plan_approval.args, "steps": [*steps, steps[0]]},
        )
    assert "not one of the proposed steps" in refused.value.message
    plan_approval.refresh_from_db()
    assert plan_approval.status == Approval.Status.PENDING


def test_a_rejected_plan_tells_the_agent_and_leaves_ordinary_gating(bea, no_enqueue):
    run, plan_approval = planned(no_enqueue)
    decisions.decide(plan_approval.pk, user=bea, decision="reject", reason="no refunds today")
    assert drive(run) == Run.Status.WAITING
    told = run.steps.filter(kind=Step.Kind.TOOL, data__tool="submit_plan").get()
    assert "rejected by bea: no refunds today" in told.data["error"]
    # Without an approved plan the lookup runs as ever (no approval), the refund is gated
    # by policy alone.
    assert not Approval.objects.filter(run=run, tool="lookup_order").exists()
    refund = pending(run)
    assert refund.tool == "issue_refund" and "plan" not in refund.explanation
    assert statuses(run) == ["skipped", "skipped", "skipped"]


def test_a_plan_naming_a_tool_the_agent_lacks_shows_the_problem(no_enqueue):
    run, _ = planned(no_enqueue)
    found = plans.problems(
        run,
        [
            {"tool": "delete_everything", "args": None, "envelope": None},
            {"tool": "lookup_order", "args": {"order_id": "x"}},
            {"tool": "issue_refund", "envelope": [{"arg": "sum", "op": "lte", "value": 1}]},
        ],
    )
    assert found[0] == "step 1: 'delete_everything' is not a tool this agent can plan"
    assert found[1].startswith("step 2: invalid arguments for lookup_order")
    assert found[2] == "step 3: issue_refund takes no argument 'sum'"


# --- calls of one model turn are matched one after the other ----------------------------------
class RegionInput(forms.Form):
    order = forms.ChoiceField(choices=[("planned", "planned"), ("reversed", "reversed")])


def region_script(data: dict) -> list:
    calls = [tool_use("test_use_region", region="eu"), tool_use("test_notify", to="ops")]
    plan = [
        {"tool": "test_use_region", "envelope": [{"arg": "region", "op": "in", "value": ["eu"]}]},
        {"tool": "test_notify", "args": {"to": "ops"}},
    ]
    return [
        [tool_use("submit_plan", goal="pick a region, tell ops", steps=plan)],
        calls if data["order"] == "planned" else calls[::-1],
        _report,
    ]


if "test-planner" not in CATALOGUE:
    register(
        replace(
            _agent("test-planner", region_script, ("test_use_region", "test_notify")),
            input_form=RegionInput,
            plans=True,
        )
    )


def test_calls_of_one_turn_take_the_plan_s_steps_in_order(bea, no_enqueue):
    run = launch("test-planner", {"order": "planned"})
    assert drive(run) == Run.Status.WAITING
    decisions.decide(pending(run).pk, user=bea, decision="approve")
    assert drive(run) == Run.Status.SUCCEEDED
    assert [name for name, _ in EXECUTED] == ["test_use_region", "test_notify"]
    assert statuses(run) == ["done", "done"]


def test_a_later_step_first_in_one_turn_is_gated_and_the_next_still_matches(bea, no_enqueue):
    run = launch("test-planner", {"order": "reversed"})
    assert drive(run) == Run.Status.WAITING
    decisions.decide(pending(run).pk, user=bea, decision="approve")
    assert drive(run) == Run.Status.WAITING
    notify = pending(run)
    assert notify.tool == "test_notify" and "out of order: test_notify is step 2" in (
        notify.explanation
    )
    region = Approval.objects.get(run=run, tool="test_use_region")
    assert region.status == Approval.Status.APPROVED and "step 1" in region.reason
    assert EXECUTED == []  # nothing of the turn runs before every call of it is decided
