"""Every demo agent with a gate ends with an answer that follows what happened to its calls:
approved as proposed, approved with an approver's edits (the edited values), rejected (with
the reason), or failed. The scripted model reads the conversation it is given; these tests
run the engine with the real tools and decide as an approver would."""

from decimal import Decimal

import pytest
from django.core import mail
from django.core.mail.backends import locmem

from agentkit.agents import get_agent
from approvals import decisions
from approvals.models import Approval
from demo.models import Refund
from runs import engine
from runs.models import Run
from tests.conftest import make_user

from .test_demo_flows import launch_default

pytestmark = pytest.mark.django_db


def gate(run: Run, tool: str) -> Approval:
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    approval = Approval.objects.get(run=run, status=Approval.Status.PENDING)
    assert approval.tool == tool
    return approval


def approve(approval: Approval, user, **edits) -> None:
    arguments = {**approval.args, **edits} if edits else None
    decisions.decide(approval.pk, user=user, decision="approve", arguments=arguments)


def reject(approval: Approval, user, reason: str) -> None:
    decisions.decide(approval.pk, user=user, decision="reject", reason=reason)


def finish(run: Run) -> str:
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    run.refresh_from_db()
    return run.output


# --- SQL analyst: the report e-mail ----------------------------------------------------------
def test_the_analyst_reports_the_e_mail_it_sent(operator, approver, no_enqueue):
    run = launch_default("sql-analyst", operator)
    approve(gate(run, "email_report"), approver)
    output = finish(run)
    assert output.startswith("Report “Revenue by category” e-mailed to analytics@example.com.")
    assert "brings in the most" in output
    assert [m.to for m in mail.outbox] == [["analytics@example.com"]]


def test_the_analyst_names_the_report_as_the_approver_edited_it(operator, approver, no_enqueue):
    run = launch_default("sql-analyst", operator)
    approve(gate(run, "email_report"), approver, subject="Revenue by category, all time")
    output = finish(run)
    assert output.startswith(
        "Report “Revenue by category, all time” e-mailed to analytics@example.com."
    )
    assert [m.subject for m in mail.outbox] == ["Revenue by category, all time"]


def test_the_analyst_says_a_rejected_report_was_not_sent(operator, approver, no_enqueue):
    run = launch_default("sql-analyst", operator)
    reject(gate(run, "email_report"), approver, "not this week")
    output = finish(run)
    assert output.startswith("The report was not e-mailed: rejected by arthur: not this week.")
    assert "brings in the most" in output  # the answer itself still stands
    assert "e-mailed to" not in output and not mail.outbox


# --- Refund desk (and its escalating twin, same script) --------------------------------------
@pytest.fixture(params=["refund-desk", "refund-desk-escalating"])
def desk(request, django_user_model) -> tuple[str, object]:
    """A refund desk and who may decide its refunds: the escalating one names the user
    "approver" (as the demo's seed has it)."""
    if request.param == "refund-desk":
        return request.param, request.getfixturevalue("approver")
    return request.param, make_user(django_user_model, "approver", "approver")


def test_the_refund_desk_reports_the_refund_and_the_e_mail(desk, operator, no_enqueue):
    slug, approver = desk
    run = launch_default(slug, operator)
    approve(gate(run, "issue_refund"), approver)
    approve(gate(run, "send_customer_email"), approver)
    output = finish(run)
    assert output.startswith("Refund issued: 689.00 on order 13.")
    assert "The customer was told by e-mail at " in output
    assert "changed" not in output


def test_the_refund_desk_reports_the_amount_the_approver_set(operator, approver, no_enqueue):
    run = launch_default("refund-desk", operator)
    approve(gate(run, "issue_refund"), approver, amount="25.00")
    email = gate(run, "send_customer_email")
    assert "We refunded 25.00" in email.args["body"]
    approve(email, approver)
    output = finish(run)
    assert output.startswith(
        "Refund issued: 25.00 on order 13 (I proposed 689.0; the approver changed it)."
    )
    assert "689.00" not in output
    assert Refund.objects.get(order_id=13).amount == Decimal("25.00")


def test_the_refund_desk_says_a_rejected_refund_was_not_made(desk, operator, no_enqueue):
    slug, approver = desk
    run = launch_default(slug, operator)
    reject(gate(run, "issue_refund"), approver, "voucher given already")
    output = finish(run)
    assert output == (
        f"No refund was issued: rejected by {approver.username}: voucher given already"
    )
    assert not Refund.objects.exists() and not mail.outbox


def test_the_refund_desk_says_the_customer_was_not_told(operator, approver, no_enqueue):
    run = launch_default("refund-desk", operator)
    approve(gate(run, "issue_refund"), approver)
    reject(gate(run, "send_customer_email"), approver, "phone them instead")
    output = finish(run)
    assert output == (
        "Refund issued: 689.00 on order 13. The customer was not told: the e-mail was not "
        "sent (rejected by arthur: phone them instead)."
    )
    assert not mail.outbox


def test_the_refund_desk_says_a_refund_that_failed_was_not_made(operator, approver, no_enqueue):
    run = launch_default("refund-desk", operator)
    approval = gate(run, "issue_refund")
    # Refunded by someone else while the approval waited: the approver is first told (the
    # preview changed), and an approval anyway is refused by the refund tool.
    Refund.objects.create(order_id=13, amount=Decimal("689.00"), reason="at the counter")
    with pytest.raises(decisions.PreviewChanged) as changed:
        approve(approval, approver)
    assert changed.value.preview["changes"][0]["after"]["left to refund"] == "-689.00"
    approve(approval, approver)
    output = finish(run)
    assert output.startswith("No refund was issued: refund of 689")
    assert output.endswith(" exceeds the 0.0 left on order 13")
    assert Refund.objects.count() == 1
    assert not Approval.objects.filter(run=run, tool="send_customer_email").exists()


# --- Customer reply (its e-mail is gated by the PII guard) -----------------------------------
CARD = "4242 4242 4242 4242"


def test_the_reply_quotes_the_e_mail_as_edited(operator, approver, no_enqueue):
    run = launch_default("customer-reply", operator)
    approval = gate(run, "send_customer_email")
    body = approval.args["body"].replace(CARD, "the card you paid with")
    approve(approval, approver, body=body)
    output = finish(run)
    assert ", as the approver edited the e-mail. The e-mail said: You wrote: I was charged " in (
        output
    )
    assert "on my card the card you paid with." in output
    assert "card redacted" not in output and CARD not in output
    assert "[phone redacted]" in output  # what stayed in the e-mail is still redacted
    (sent,) = mail.outbox
    assert sent.body == body


def test_the_reply_says_a_rejected_e_mail_was_not_sent(operator, approver, no_enqueue):
    run = launch_default("customer-reply", operator)
    reject(gate(run, "send_customer_email"), approver, "never quote a card number")
    output = finish(run)
    assert output == (
        "I did not reply to the customer about order 13: rejected by arthur: never quote "
        "a card number."
    )
    assert "Replied" not in output and not mail.outbox


def test_the_reply_says_an_e_mail_that_failed_was_not_sent(
    operator, approver, no_enqueue, monkeypatch
):
    def refuse(self, messages):
        raise ConnectionRefusedError("mail server down")

    run = launch_default("customer-reply", operator)
    approval = gate(run, "send_customer_email")
    monkeypatch.setattr(locmem.EmailBackend, "send_messages", refuse)
    approve(approval, approver)
    output = finish(run)
    assert output == (
        "I did not reply to the customer about order 13: send_customer_email failed: "
        "ConnectionRefusedError: mail server down."
    )


# --- Goodwill desk ---------------------------------------------------------------------------
@pytest.fixture
def goodwill(operator) -> Run:
    agent = get_agent("goodwill-desk")
    data, errors = agent.validate_input(
        {
            "customer_email": "grace.thompson1@example.com",
            "amount": "15.00",
            "reason": "late delivery",
        }
    )
    assert not errors
    return engine.launch(agent=agent, input=data, launched_by=operator, provider="scripted")


def test_the_goodwill_desk_reports_the_credit_granted(goodwill, approver, no_enqueue):
    run = goodwill
    approve(gate(run, "grant_goodwill_credit"), approver)
    assert finish(run) == "Granted a goodwill credit of 15.00 to grace.thompson1@example.com."


def test_the_goodwill_desk_reports_the_approver_s_amount(goodwill, approver, no_enqueue):
    run = goodwill
    approve(gate(run, "grant_goodwill_credit"), approver, amount="5.00")
    assert finish(run) == (
        "Granted a goodwill credit of 5.00 to grace.thompson1@example.com "
        "(the approver changed amount 15.00 to 5.00)."
    )


def test_the_goodwill_desk_says_a_rejected_credit_was_not_granted(goodwill, approver, no_enqueue):
    run = goodwill
    reject(gate(run, "grant_goodwill_credit"), approver, "not a bad experience")
    assert finish(run) == "No credit was granted: rejected by arthur: not a bad experience"
    assert not mail.outbox
