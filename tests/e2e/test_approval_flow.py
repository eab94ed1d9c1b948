"""An operator launches a gated refund; an approver decides it; the operator watches it live."""

import re
from decimal import Decimal

import pytest
from playwright.sync_api import expect

from .conftest import screenshot
from .pages import (
    expect_status,
    expect_timeline_complete,
    launch_refund,
    open_approval_from_queue,
)

pytestmark = pytest.mark.e2e


def test_operator_sees_the_run_finish_live_after_an_approver_approves(server, login):
    operator = login("operator")
    screenshot(operator.page, "dashboard")

    run_id = launch_refund(
        operator, order_id=7, amount="12.50", reason="Arrived damaged", shot="launch-form"
    )
    page = operator.page
    operator.mark_document()
    # issue_refund is irreversible with a high blast radius: gated whatever the amount.
    expect_status(page, "waiting")
    expect(page.locator("#timeline .step[data-kind=gate]")).to_have_count(1)
    expect_timeline_complete(page, server, run_id)
    screenshot(page, "run-live")

    approver = login("approver")
    approval_id = server.pending_approval(run_id)
    pending_before = int(approver.page.locator("#nav-pending-count").inner_text())
    assert pending_before >= 1
    open_approval_from_queue(approver, approval_id, shot="approvals-queue")
    screen = approver.page
    expect(screen.locator("[name=arg_amount]")).to_have_value("12.50")
    expect(screen.locator("[name=arg_order_id]")).to_have_value("7")
    screenshot(screen, "approval")
    approver.mark_document()
    screen.click("button#approve")
    expect(screen.locator("#decision-result")).to_contain_text(re.compile("approved", re.I))

    # The operator's page moves on by itself: refund, e-mail, final answer, succeeded.
    expect_status(page, "succeeded")
    operator.assert_same_document()
    seqs = expect_timeline_complete(page, server, run_id)
    assert page.locator("#timeline .step[data-kind=tool]").count() >= 3
    assert len(seqs) > 6
    assert server.refunds(run_id) == [(7, Decimal("12.50"), "Arrived damaged")]
    # Every viewer's pending count follows the decision, without a reload.
    expect(screen.locator("#nav-pending-count")).to_have_text(str(pending_before - 1))
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
