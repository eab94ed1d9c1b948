"""A call carrying personal data waits for a person: the approval card lists what the PII
guard found (kind, where, masked), the approver decides, and the run's output is redacted."""

import pytest
from playwright.sync_api import expect

from .conftest import screenshot
from .pages import RUN_URL, expect_status, open_launch_form

pytestmark = pytest.mark.e2e

CARD = "4242 4242 4242 4242"


def test_the_approver_sees_what_was_detected_and_decides(server, login):
    operator = login("operator")
    page = operator.page
    open_launch_form(operator, "customer-reply")  # the default message carries a card, a phone
    page.click("button#launch")
    page.wait_for_url(RUN_URL)
    run_id = RUN_URL.search(page.url)["id"]
    expect_status(page, "waiting")
    operator.mark_document()
    # The run's input as the timeline keeps it: the header's summary quotes the customer's
    # message with the card and phone masked, and so does the runs list.
    summary = page.locator("#run-header .input-summary")
    expect(summary).to_contain_text("order 13 · I was charged twice")
    expect(summary).to_contain_text("**** **** **** 4242")
    expect(summary).not_to_contain_text(CARD)
    expect(summary).not_to_contain_text("7946 0958")
    guard = page.locator("#timeline .step[data-kind=guard]")
    expect(guard).to_have_count(1)
    expect(guard).to_contain_text("PII guard: gated in the call to send_customer_email")
    expect(guard).to_contain_text("**** **** **** 4242")
    expect(guard).not_to_contain_text(CARD)

    approval_id = server.pending_approval(run_id, tool="send_customer_email")
    approver = login("approver")
    approver.goto(f"/approvals/{approval_id}/")
    card = approver.page
    expect(card.locator("h1")).to_contain_text("send_customer_email")
    findings = card.locator("#pii-findings .pii-finding")
    expect(findings).to_have_count(2)
    expect(findings.nth(0)).to_have_text("card in body: **** **** **** 4242")
    expect(findings.nth(1)).to_have_text("phone in body: +44 ** **** **58")
    expect(card.locator("#pii-findings")).not_to_contain_text(CARD)
    expect(card.locator("#original-args")).to_contain_text(CARD)  # the call, shown once in full
    expect(card.locator("body")).to_contain_text("personal data leaving the system")
    screenshot(card, "approval-pii-findings")

    # The approver takes the card number out of the e-mail and approves that.
    body = card.locator("[name=arg_body]")
    body.fill(body.input_value().replace(CARD, "the card you paid with"))
    expect(card.locator("#arg-diff")).to_have_attribute("data-edited", "true")
    expect(card.locator("#arg-diff")).to_have_attribute("data-valid", "true")
    # Pressed straight from the field: the press waits for the preview its leaving asks for.
    card.click("button#edit-approve")
    expect(card.locator("#decision-outcome")).to_contain_text("Approved with your edits")

    expect_status(page, "succeeded")
    operator.assert_same_document()
    (sent,) = server.query(
        "SELECT body FROM demo_outboxemail WHERE subject = ?", "About your order 13"
    )
    assert CARD not in sent[0] and "the card you paid with" in sent[0]
    runs = approver.page
    approver.goto("/runs/")
    row = runs.locator(f"#run-{run_id}")
    expect(row.locator(".input-summary")).to_contain_text("**** **** **** 4242")
    expect(row).not_to_contain_text(CARD)
    # The answer quotes the e-mail as sent (edited), with what is left in it redacted.
    output = page.locator("#run-header .output")
    expect(output).to_contain_text("as the approver edited the e-mail")
    expect(output).to_contain_text("on my card the card you paid with.")
    expect(output).to_contain_text("[phone redacted]")
    expect(output).not_to_contain_text("[card redacted]")
    expect(output).not_to_contain_text(CARD)
