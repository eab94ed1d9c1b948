"""The demo shows what the product is about with its default inputs: a gated refund that
succeeds once approved, and a question the operator answers."""

from decimal import Decimal

import pytest

from agentkit.agents import get_agent
from approvals import decisions
from approvals.models import Approval
from demo.models import Refund
from runs import engine
from runs.models import Run, Step

pytestmark = pytest.mark.django_db


def default_input(slug: str) -> dict:
    agent = get_agent(slug)
    initial = {name: f.initial for name, f in agent.input_form.base_fields.items()}
    data, errors = agent.validate_input({k: v for k, v in initial.items() if v is not None})
    assert not errors
    return data


def launch_default(slug: str, operator) -> Run:
    agent = get_agent(slug)
    return engine.launch(
        agent=agent, input=default_input(slug), launched_by=operator, provider="scripted"
    )


def test_the_default_refund_is_gated_and_succeeds_once_approved(operator, approver, no_enqueue):
    run = launch_default("refund-desk", operator)
    assert run.input_summary == "order 13 · full refund"
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    approval = Approval.objects.get(run=run, status=Approval.Status.PENDING)
    assert approval.tool == "issue_refund"
    assert Decimal(approval.args["amount"]) > 500

    decisions.decide(approval.pk, user=approver, decision="approve")
    # Then the customer's e-mail (irreversible) is gated too.
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    email = Approval.objects.get(run=run, status=Approval.Status.PENDING)
    assert email.tool == "send_customer_email"
    decisions.decide(email.pk, user=approver, decision="approve")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    run.refresh_from_db()
    assert Refund.objects.get(order_id=13).amount == Decimal(approval.args["amount"])
    assert "Refund issued" in run.output
    assert (run.approved_count, run.tool_failed_count, run.outcome_badges) == (2, 0, [])


def test_a_second_default_refund_finds_the_order_refunded(operator, approver, no_enqueue):
    Refund.objects.create(order_id=13, amount=Decimal("689.00"), reason="earlier")
    run = launch_default("refund-desk", operator)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    run.refresh_from_db()
    assert "already refunded in full" in run.output
    assert not Approval.objects.filter(run=run).exists()


def test_the_order_inquiry_asks_which_order_and_uses_the_answer(operator, approver, no_enqueue):
    run = launch_default("order-inquiry", operator)
    assert run.input_summary.startswith("grace.thompson1@example.com · Where is my order?")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    question = Approval.objects.get(run=run, status=Approval.Status.PENDING)
    assert question.kind == Approval.Kind.QUESTION
    assert len(question.options) > 1 and all(o.startswith("order ") for o in question.options)

    picked = question.options[1]
    decisions.decide(question.pk, user=approver, decision="answer", answer=picked)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    run.refresh_from_db()
    order_id = int(picked.split()[1])
    lookup = run.steps.get(kind=Step.Kind.TOOL, data__tool="lookup_order")
    assert lookup.data["args"] == {"order_id": order_id}
    assert f"Order {order_id} " in run.output
    assert [label for _, label in run.outcome_badges] == ["1 answered"]


def test_a_rejected_question_ends_without_a_lookup(operator, approver, no_enqueue):
    run = launch_default("order-inquiry", operator)
    engine.advance(run.pk, time_slice=30)
    question = Approval.objects.get(run=run, status=Approval.Status.PENDING)
    decisions.decide(question.pk, user=approver, decision="reject", reason="ask the customer")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    run.refresh_from_db()
    assert "No order was chosen" in run.output
    assert not run.steps.filter(kind=Step.Kind.TOOL, data__tool="lookup_order").exists()
    assert run.rejected_count == 1 and run.tool_failed_count == 0
