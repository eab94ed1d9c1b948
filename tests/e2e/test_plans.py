"""Plans approved once, in a browser: the operator launches the planning refund desk; its plan
shows on the run page as a to-do list; an approver approves the plan on its one screen; the
operator watches the list tick through live (the high-risk refund still gets its own card);
the e-mail the agent did not plan is gated again, and its card says which deviation."""

import re
from decimal import Decimal

import pytest
from playwright.sync_api import expect

from .conftest import screenshot
from .pages import RUN_URL, decide, expect_status, expect_timeline_complete, open_launch_form

pytestmark = pytest.mark.e2e


def step(page, number: int):
    return page.locator(f"#run-plan .todo-step[data-step='{number}']")


def test_a_plan_is_approved_once_ticks_through_live_and_a_deviation_is_gated(server, login):
    operator = login("operator")
    open_launch_form(operator, "planned-refund-desk")
    operator.page.fill("[name=amount]", "30.00")
    operator.page.click("button#launch")
    operator.page.wait_for_url(RUN_URL)
    run_id = RUN_URL.search(operator.page.url)["id"]
    page = operator.page
    expect_status(page, "waiting")
    # The proposed plan, as a to-do list on the run page.
    expect(page.locator("#run-plan .plan-todo")).to_have_attribute("data-state", "proposed")
    expect(page.locator("#run-plan .todo-step[data-status=pending]")).to_have_count(3)
    operator.mark_document()

    # The approver opens the plan's approval: one screen with the goal and the steps.
    plan_id = server.pending_approval(run_id, tool="submit_plan")
    approver = login("approver")
    card = approver.page
    approver.goto(f"/approvals/{plan_id}/")
    card.wait_for_url(f"**/approvals/{plan_id}/plan/")
    expect(card.locator("#plan-goal-text")).to_contain_text("Refund 30.00 on order 13")
    expect(card.locator(".plan-step")).to_have_count(3)
    refund_row = card.locator(".plan-step[data-tool=issue_refund]")
    expect(refund_row.locator(".needs-own")).to_be_visible()
    expect(card.locator("#value_1_1")).to_have_value("30.00")
    screenshot(card, "plan-screen")
    card.click("#approve-plan")
    expect(card.locator("#decision-result")).to_contain_text("Plan approved")

    # Live, without a reload: the lookup ran under the plan; the refund waits for its card.
    expect(page.locator("#run-plan .plan-todo")).to_have_attribute("data-state", "approved")
    expect(step(page, 1)).to_have_attribute("data-status", "done")
    expect(step(page, 2)).to_have_attribute("data-status", "in progress")
    expect(step(page, 3)).to_have_attribute("data-status", "pending")
    expect(page.locator("#timeline")).to_contain_text(re.compile(r"allowed by plan #\d+ step 1"))

    refund = server.pending_approval(run_id, tool="issue_refund")
    approver.goto(f"/approvals/{refund}/")
    expect(card.locator("#why-gated")).to_contain_text("the plan does not cover it")
    decide(approver, refund, "approve", navigate=False)

    # The e-mail follows the plan; the copy to support does not, and is gated again.
    expect(step(page, 2)).to_have_attribute("data-status", "done")
    expect(step(page, 3)).to_have_attribute("data-status", "done")
    deviation = page.locator("#run-plan .deviation[data-kind=more_calls]")
    expect(deviation).to_contain_text("more calls than planned")
    copy = server.pending_approval(run_id, tool="send_customer_email")
    approver.goto(f"/approvals/{copy}/")
    expect(card.locator("#why-gated")).to_contain_text(re.compile(r"deviates from plan #\d+"))
    expect(card.locator("#why-gated")).to_contain_text("more calls than planned")
    screenshot(card, "plan-deviation")
    decide(approver, copy, "reject", reason="Support reads the refunds ledger", navigate=False)

    expect_status(page, "succeeded")
    expect(deviation).to_have_attribute("data-decision", "rejected")
    screenshot(page, "plan-todo")
    operator.assert_same_document()
    expect_timeline_complete(page, server, run_id)
    # The one refund made is the planned one, at the amount asked.
    assert server.refunds(run_id) == [(13, Decimal("30.00"), "Arrived damaged")]
    assert not operator.console_errors and not approver.console_errors
