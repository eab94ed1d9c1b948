"""The demo chain: the complaint triage's verdict launches the refund desk (a chained run),
end to end through the engine, the follow-up task and the approvals."""

from decimal import Decimal

import pytest
from django.urls import reverse

from agentkit.agents import get_agent
from approvals import decisions
from approvals.models import Approval
from demo.models import Refund
from runs import engine
from runs.models import Run, Step

from .test_demo_flows import default_input, launch_default

pytestmark = pytest.mark.django_db


def follow_up_step(run: Run) -> dict:
    return run.steps.get(kind=Step.Kind.STATUS, data__event="follow_up").data


def triage(operator, django_capture_on_commit_callbacks, **input) -> Run:
    run = engine.launch(
        agent=get_agent("complaint-triage"),
        input={**default_input("complaint-triage"), **input},
        launched_by=operator,
        provider="scripted",
    )
    # Committed as a worker commits: the success's callbacks send the follow-up task.
    with django_capture_on_commit_callbacks(execute=True):
        assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    run.refresh_from_db()
    return run


def test_a_damaged_delivery_launches_a_refund_that_runs_to_the_end(
    operator, approver, no_enqueue, eager, django_capture_on_commit_callbacks, client
):
    parent = triage(operator, django_capture_on_commit_callbacks)
    assert '"action": "refund"' in parent.output

    child = Run.objects.get(parent=parent)
    reason = "Damaged on arrival: The desk arrived damaged: one leg is bent and it wobbles."
    assert child.agent == "refund-desk"
    assert child.input == {"order_id": 13, "amount": None, "reason": reason}
    assert (child.trigger, child.source) == (Run.Trigger.CHAINED, f"run {parent.pk}")
    assert child.launched_by == operator and child.provider == "scripted"
    assert str(child.pk) in no_enqueue  # sent to a worker once the launch committed
    step = follow_up_step(parent)
    assert (step["outcome"], step["agent"], step["child"]) == (
        "launched",
        "refund-desk",
        str(child.pk),
    )

    # The child runs like any refund: gated at 689.00, then the customer's e-mail.
    assert engine.advance(child.pk, time_slice=30) == Run.Status.WAITING
    refund = Approval.objects.get(run=child, status=Approval.Status.PENDING)
    assert (refund.tool, refund.args["reason"]) == ("issue_refund", reason)
    decisions.decide(refund.pk, user=approver, decision="approve")
    assert engine.advance(child.pk, time_slice=30) == Run.Status.WAITING
    email = Approval.objects.get(run=child, status=Approval.Status.PENDING)
    decisions.decide(email.pk, user=approver, decision="approve")
    assert engine.advance(child.pk, time_slice=30) == Run.Status.SUCCEEDED
    made = Refund.objects.get(order_id=13)
    assert (made.amount, made.reason, made.run_id) == (Decimal("689.00"), reason, child.pk)
    # A refund desk has no follow-ups: the chain ends here.
    assert not Run.objects.filter(parent=child).exists()

    client.force_login(operator)
    parent_page = client.get(reverse("runs:detail", args=[parent.pk])).content.decode()
    assert f'href="{reverse("runs:detail", args=[child.pk])}"' in parent_page
    child_page = client.get(reverse("runs:detail", args=[child.pk])).content.decode()
    assert "Follows" in child_page
    assert f'href="{reverse("runs:detail", args=[parent.pk])}"' in child_page


def test_a_complaint_a_refund_does_not_answer_launches_nothing(
    operator, no_enqueue, eager, django_capture_on_commit_callbacks
):
    parent = triage(
        operator, django_capture_on_commit_callbacks, message="Can I get a second one in blue?"
    )
    assert '"action": "reply"' in parent.output
    assert not Run.objects.filter(parent=parent).exists()
    step = follow_up_step(parent)
    assert (step["outcome"], step["agent"]) == ("skipped", "refund-desk")


def test_an_order_that_cannot_be_found_fails_the_follow_up_visibly(
    operator, no_enqueue, eager, django_capture_on_commit_callbacks
):
    parent = triage(operator, django_capture_on_commit_callbacks, order_id=99999)
    assert "could not look up order 99999" in parent.output
    assert not Run.objects.filter(parent=parent).exists()
    step = follow_up_step(parent)
    assert step["outcome"] == "failed"
    assert step["detail"] == "the mapping raised ValueError: the run's output is not JSON"


def test_a_triage_run_remembers_what_it_follows_up_with(operator, no_enqueue):
    run = launch_default("complaint-triage", operator)
    assert run.agent_config["follow_ups"] == [{"name": "refund-desk", "agent": "refund-desk"}]
    assert run.input_summary.startswith("order 13 · The desk arrived damaged")
