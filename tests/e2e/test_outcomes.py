"""Outcomes an operator can scan, in a real browser: a rejected run's badge on the runs list
(live) and the audit list (with who decided), and the demo's question answered from the UI."""

import re

import pytest
from playwright.sync_api import expect

from .pages import RUN_URL, decide, expect_status, launch_refund, open_launch_form

pytestmark = pytest.mark.e2e


def test_a_rejected_run_shows_its_badge_on_the_runs_list_and_audit_list(server, login):
    operator = login("operator")
    run_id = launch_refund(operator, order_id=21, amount="4.00", reason="Changed mind")
    expect_status(operator.page, "waiting")
    # The runs list is open while the approver decides: the row changes without a reload.
    operator.goto("/runs/")
    operator.mark_document()
    row = operator.page.locator(f"tr#run-{run_id}")
    expect(row.locator(".input-summary")).to_have_text("order 21 · refund 4.00")
    expect(row.locator(".badge.outcome-rejected")).to_have_count(0)

    approver = login("approver")
    decide(approver, server.pending_approval(run_id), "reject", reason="Outside the window")
    expect(row).to_have_attribute("data-status", "succeeded")
    expect(row.locator(".badge.outcome-rejected")).to_have_text("1 rejected")
    operator.assert_same_document()

    # The audit list says who decided what, and finds the run by its outcome and decider.
    operator.goto("/audit/?outcome=rejected&decided_by=approver")
    audit_row = operator.page.locator(f"tr.audit-row[data-run-id='{run_id}']")
    expect(audit_row.locator(".badge.outcome-rejected")).to_have_text("1 rejected")
    expect(audit_row.locator(".decisions")).to_have_text("rejected by approver")
    operator.goto("/audit/?outcome=edited")
    expect(operator.page.locator(f"tr.audit-row[data-run-id='{run_id}']")).to_have_count(0)
    assert not operator.console_errors and not approver.console_errors


def test_answer_works_on_the_demo_question(server, login):
    operator = login("operator")
    open_launch_form(operator, "order-inquiry")
    page = operator.page
    page.click("button#launch")  # the demo's default input
    page.wait_for_url(RUN_URL)
    run_id = RUN_URL.search(page.url)["id"]
    expect_status(page, "waiting")
    operator.mark_document()

    approver = login("approver")
    question_id = server.pending_approval(run_id, tool="ask_operator")
    approver.goto(f"/approvals/{question_id}/")
    card = approver.page
    expect(card.locator("body")).to_contain_text("Which order does the customer mean?")
    options = card.locator("#answer-options option").evaluate_all("opts => opts.map(o => o.value)")
    assert len(options) > 1, options
    card.fill("#id_answer", options[0])
    card.click("button#answer")
    expect(card.locator("#decision-result")).to_contain_text(re.compile("answered", re.I))

    # The agent goes on with the order the operator picked.
    order_id = re.match(r"order (\d+)", options[0])[1]
    expect_status(page, "succeeded")
    operator.assert_same_document()
    expect(page.locator("#timeline .step[data-kind=llm]").last).to_contain_text(
        f"Order {order_id} "
    )
    expect(page.locator("#run-header .badge.outcome-answered")).to_have_text("1 answered")
    assert not operator.console_errors and not approver.console_errors
