"""Approving a reviewed set of approvals from the queue in one action: only the ticked rows,
ticks that survive a live update of the queue, a result per item."""

import pytest
from playwright.sync_api import expect

from .conftest import Session
from .pages import RUN_URL, open_launch_form

pytestmark = pytest.mark.e2e


def launch_report(session: Session, to: str) -> str:
    """The SQL analyst e-mails its report to an address off its allow-list: gated (medium)."""
    page = session.page
    open_launch_form(session, "sql-analyst")
    page.fill("[name=question]", "Revenue by category?")
    page.fill("[name=report_to]", to)
    page.click("button#launch")
    page.wait_for_url(RUN_URL)
    return RUN_URL.search(page.url)["id"]


def test_approve_selected_decides_only_the_ticked_rows(server, login):
    operator = login("operator")
    runs = [launch_report(operator, f"batch{i}@example.com") for i in range(2)]
    approvals = [server.pending_approval(run, tool="email_report") for run in runs]

    approver = login("approver")
    approver.goto("/approvals/")
    page = approver.page
    row = page.locator(f"tr.approval-row[data-approval-id='{approvals[0]}']")
    expect(row).to_contain_text("batch0@example.com")  # the call's effect is on the row
    row.locator("input.batch-pick").check()

    # A third request arrives while the approver reviews: the queue re-renders live, the
    # tick stays, and the new row is not ticked.
    third = launch_report(operator, "batch2@example.com")
    late = server.pending_approval(third, tool="email_report")
    late_row = page.locator(f"tr.approval-row[data-approval-id='{late}']")
    expect(late_row).to_be_visible()
    expect(row.locator("input.batch-pick")).to_be_checked()
    expect(late_row.locator("input.batch-pick")).not_to_be_checked()

    page.locator(f"tr.approval-row[data-approval-id='{approvals[1]}'] input.batch-pick").check()
    page.click("#batch-approve")
    items = page.locator("#batch-result tr.batch-item")
    expect(items).to_have_count(2)
    for approval_id in approvals:
        item = page.locator(f"#batch-result tr.batch-item[data-approval-id='{approval_id}']")
        expect(item).to_have_attribute("data-result", "decided")
    for run in runs:
        server.wait_for_status(run, "succeeded")
    status = server.query("SELECT status FROM approvals_approval WHERE id = ?", server.key(late))
    assert status == [("pending",)]
    assert not approver.console_errors, approver.console_errors
