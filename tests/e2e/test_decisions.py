"""Rejecting and editing a gated refund from the approval screen, seen from the run page."""

import re
from decimal import Decimal

import pytest
from playwright.sync_api import expect

from .pages import decide, expect_status, expect_timeline_complete, launch_refund

pytestmark = pytest.mark.e2e


def test_a_rejection_reason_reaches_the_agent_and_no_refund_is_made(server, login):
    operator = login("operator")
    run_id = launch_refund(operator, order_id=11, amount="3.00", reason="Wrong size")
    page = operator.page
    expect_status(page, "waiting")
    operator.mark_document()

    # Another approver has the queue open: the row leaves it once someone else decides.
    admin = login("admin")
    admin.goto("/approvals/")
    admin.mark_document()
    approval_id = server.pending_approval(run_id)
    row = admin.page.locator(f"tr.approval-row[data-approval-id='{approval_id}']")
    expect(row).to_be_visible()

    approver = login("approver")
    why = "Customer already got a voucher for this order"
    decide(approver, approval_id, "reject", reason=why)
    expect(approver.page.locator("#decision-result")).to_contain_text(re.compile("rejected", re.I))
    expect(row).to_have_count(0)
    admin.assert_same_document()

    # The refund tool's policy is "tell the agent": the run goes on and ends on its own.
    expect_status(page, "succeeded")
    operator.assert_same_document()
    expect_timeline_complete(page, server, run_id)
    # The agent got the approver's words as the tool result, and its last answer says so.
    expect(page.locator("#timeline .step[data-kind=tool]").last).to_contain_text(why)
    expect(page.locator("#timeline .step[data-kind=llm]").last).to_contain_text(
        "No refund was issued"
    )
    expect(page.locator("#timeline .step[data-kind=llm]").last).to_contain_text(why)
    assert server.refunds(run_id) == []
    assert not operator.console_errors and not approver.console_errors
    assert not admin.console_errors


def test_edit_and_approve_refunds_the_edited_amount(server, login):
    operator = login("operator")
    run_id = launch_refund(operator, order_id=13, amount="40.00", reason="Late delivery")
    page = operator.page
    expect_status(page, "waiting")
    operator.mark_document()

    approver = login("approver")
    approval_id = server.pending_approval(run_id)
    decide(
        approver,
        approval_id,
        "edit-approve",
        args={"amount": "25.00"},
        reason="Partial refund: shipping is not refunded",
    )
    expect(approver.page.locator("#decision-result")).to_contain_text(re.compile("approved", re.I))
    # The customer e-mail is gated too; its body quotes the refund that was really made.
    email = server.pending_approval(run_id, tool="send_customer_email")
    approver.goto(f"/approvals/{email}/")
    expect(approver.page.locator("[name=arg_body]")).to_have_value(re.compile(r"refunded 25\.00"))
    decide(approver, email, "approve", navigate=False)

    expect_status(page, "succeeded")
    operator.assert_same_document()
    expect_timeline_complete(page, server, run_id)
    # What ran is what the approver wrote, not what the model proposed.
    assert server.refunds(run_id) == [(13, Decimal("25.00"), "Late delivery")]
    expect(page.locator("#timeline")).to_contain_text("25.00")
    assert not operator.console_errors and not approver.console_errors
