"""An operator launches a gated refund; an approver decides it; the operator watches it live."""

import re
from decimal import Decimal

import pytest
from playwright.sync_api import expect

from .conftest import screenshot
from .pages import (
    decide,
    expect_status,
    expect_timeline_complete,
    launch_refund,
    open_approval_from_queue,
)

pytestmark = pytest.mark.e2e


def test_operator_sees_the_run_finish_live_after_an_approver_approves(server, login):
    approver = login("approver")
    queue = approver.page
    approver.goto("/approvals/")
    approver.mark_document()
    pending_before = int(queue.locator("#nav-pending-count").inner_text())

    operator = login("operator")
    run_id = launch_refund(
        operator, order_id=7, amount="12.50", reason="Arrived damaged", shot="launch-form"
    )
    page = operator.page
    operator.mark_document()
    # issue_refund is irreversible with a high blast radius: gated whatever the amount.
    expect_status(page, "waiting")
    gates = page.locator("#timeline .step[data-kind=gate]")
    expect(gates).to_have_count(1)
    expect_timeline_complete(page, server, run_id)
    screenshot(page, "run-live")
    # The dashboard, in another tab of the operator's browser, with this run in flight.
    dashboard = operator.context.new_page()
    dashboard.goto("/")
    expect(dashboard.locator(f"main a[href='/runs/{run_id}/']").first).to_be_visible()
    screenshot(dashboard, "dashboard")
    dashboard.close()

    # The approver's open queue and pending count show the new gate without a reload.
    refund_approval = server.pending_approval(run_id)
    row = queue.locator(f"tr.approval-row[data-approval-id='{refund_approval}']")
    expect(row).to_be_visible()
    expect(queue.locator("#nav-pending-count")).to_have_text(str(pending_before + 1))
    approver.assert_same_document()
    screenshot(queue, "approvals-queue")
    row.locator(f"a[href$='/approvals/{refund_approval}/']").first.click()
    queue.wait_for_url(f"**/approvals/{refund_approval}/")
    screen = approver.page
    expect(screen.locator("[name=arg_amount]")).to_have_value("12.50")
    expect(screen.locator("[name=arg_order_id]")).to_have_value("7")
    screenshot(screen, "approval")
    screen.click("button#approve")
    # An irreversible refund: the exact effect is confirmed with a second press.
    expect(screen.locator("#confirm-effect")).to_have_text("Refund 12.50 on order 7")
    screenshot(screen, "approval-confirm-effect")
    screen.click("button#confirm-approve")
    expect(screen.locator("#decision-result")).to_contain_text(re.compile("approved", re.I))

    # Live on the operator's page: the decision, the refund, then the customer e-mail, which
    # is irreversible too and waits at its own gate.
    expect(gates).to_have_count(2)
    expect_status(page, "waiting")
    expect(page.locator("#timeline .step[data-kind=tool]").last).to_contain_text("refund_id")
    operator.assert_same_document()

    email_approval = server.pending_approval(run_id, tool="send_customer_email")
    open_approval_from_queue(approver, email_approval)
    approver.mark_document()
    decide(approver, email_approval, "approve", navigate=False)

    expect_status(page, "succeeded")
    operator.assert_same_document()
    seqs = expect_timeline_complete(page, server, run_id)
    assert len(seqs) > 12
    assert server.refunds(run_id) == [(7, Decimal("12.50"), "Arrived damaged")]
    subject = "Your refund for order 7"
    sent = server.query("SELECT COUNT(*) FROM demo_outboxemail WHERE subject = ?", subject)
    assert sent == [(1,)]
    # Both gates decided: the approver's count is back where it was, without a reload.
    expect(screen.locator("#nav-pending-count")).to_have_text(str(pending_before))
    approver.assert_same_document()
    assert not operator.console_errors and not approver.console_errors, (
        operator.console_errors,
        approver.console_errors,
    )

    operator.goto("/runs/")
    expect(page.locator(f"tr.run-row[data-run-id='{run_id}']")).to_have_attribute(
        "data-status", "succeeded"
    )
    screenshot(page, "runs-list")
    operator.goto(f"/audit/runs/{run_id}/")
    expect(page.locator("#chain-status")).to_have_attribute("data-ok", "true")
    screenshot(page, "audit")
