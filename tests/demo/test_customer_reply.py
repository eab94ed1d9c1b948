"""The customer-reply demo agent: the PII guard gates its e-mail (the card lists what was
found, masked), redacts its output, and its e-mails are rate limited."""

import pytest
from django.core import mail
from django.test import Client

from agentkit.agents import get_agent
from approvals import decisions
from approvals.models import Approval
from runs import engine
from runs.models import RateLimitUse, Run, Step

pytestmark = pytest.mark.django_db

CARD = "4242 4242 4242 4242"
PHONE = "+44 20 7946 0958"


def launch(operator) -> Run:
    agent = get_agent("customer-reply")
    message = agent.input_form.base_fields["message"].initial  # the form's default
    data, errors = agent.validate_input({"order_id": 13, "message": message})
    assert not errors, errors
    return engine.launch(agent=agent, input=data, launched_by=operator, provider="scripted")


def test_the_e_mail_waits_for_a_person_who_sees_what_was_found(operator, approver, no_enqueue):
    run = launch(operator)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    approval = Approval.objects.get(run=run)
    assert approval.tool == "send_customer_email"
    assert approval.explanation.startswith(
        "personal data leaving the system (card in body; phone in body)"
    )
    guard = run.steps.get(kind=Step.Kind.GUARD).data
    # The recipient is exempt: where the e-mail goes is not what it leaks.
    assert [f["field"] for f in guard["findings"]] == ["body", "body"]

    client = Client()
    client.force_login(approver)
    page = client.get(f"/approvals/{approval.pk}/").content.decode()
    findings = page[
        page.index('id="pii-findings"') : page.index("</ul>", page.index("pii-findings"))
    ]
    assert "**** **** **** 4242" in findings and "+44 ** **** **58" in findings
    assert CARD not in findings and PHONE not in findings  # masked in the list
    assert CARD in page  # the exact call is shown once, in full, to decide on
    detail = client.get(f"/api/approvals/{approval.pk}").json()
    assert [f["masked"] for f in detail["pii_findings"]] == [
        "**** **** **** 4242",
        "+44 ** **** **58",
    ]

    decisions.decide(approval.pk, user=approver, decision="approve")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    run.refresh_from_db()
    (sent,) = mail.outbox
    assert CARD in sent.body  # approved as shown
    # The output quotes the message: redacted.
    assert run.output == (
        "Replied to [email redacted] about order 13. The e-mail said: You wrote: I was charged "
        "twice for this order on my card [card redacted]. Please call me back on [phone "
        "redacted].\n\nWe are looking into it and will get back to you within a day."
    )
    assert (
        RateLimitUse.objects.filter(scope="agent:customer-reply:send_customer_email").count() == 1
    )


def test_a_rejected_e_mail_is_not_sent(operator, approver, no_enqueue):
    run = launch(operator)
    engine.advance(run.pk, time_slice=30)
    approval = Approval.objects.get(run=run)
    decisions.decide(approval.pk, user=approver, decision="reject", reason="card number")
    engine.advance(run.pk, time_slice=30)
    assert not mail.outbox
    assert not RateLimitUse.objects.exists()  # only calls that run count
