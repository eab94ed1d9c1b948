"""Budgets in a real browser: an admin adds one on the Budgets page, a run of the agent passes
its approval threshold and waits, the dashboard's gauge says so, and the approver's "continue"
on the budget question lets the run finish."""

import re

import pytest
from playwright.sync_api import expect

from .pages import RUN_URL, expect_status, open_launch_form

pytestmark = pytest.mark.e2e

AGENT = "complaint-triage"  # no other browser test runs it: its day's spend is this test's


def test_a_run_past_the_approval_threshold_waits_and_continues_once_approved(server, login):
    # A 1-cent daily budget asking approval at 10 % (0.1 cent): the triage's first model
    # call costs about 0.15 cent; it stops at 1000 %, far off.
    admin = login("admin")
    admin.goto("/budgets/")
    page = admin.page
    page.select_option("#budget-new [name=agent]", AGENT)
    page.select_option("#budget-new [name=period]", "day")
    page.fill("#budget-new [name=amount_usd]", "0.01")
    page.fill("#budget-new [name=warn_percent]", "5")
    page.fill("#budget-new [name=approve_percent]", "10")
    page.fill("#budget-new [name=stop_percent]", "1000")
    page.click("#budget-new button[type=submit]")
    row = page.locator(f"tr.budget-row[data-agent='{AGENT}']")
    expect(row).to_have_attribute("data-level", "ok")

    operator = login("operator")
    open_launch_form(operator, AGENT)
    operator.page.click("button#launch")
    operator.page.wait_for_url(RUN_URL)
    run_id = RUN_URL.search(operator.page.url)["id"]
    expect_status(operator.page, "waiting")
    operator.mark_document()
    timeline = operator.page.locator("#timeline")
    expect(timeline).to_contain_text("budget warning: complaint-triage")
    expect(timeline).to_contain_text("budget spent: runs need approval: complaint-triage")

    # The dashboard's gauge is past the approval threshold.
    viewer = login("approver")
    viewer.goto("/")
    gauge = viewer.page.locator(f"#dashboard-budgets .budget-row[data-agent='{AGENT}']")
    expect(gauge).to_have_attribute("data-level", "approve")
    expect(gauge.locator("meter")).to_have_attribute("high", "10")
    expect(gauge).to_contain_text("runs need approval")

    # The budget question: the approver answers "continue" and the run finishes.
    question_id = server.pending_approval(run_id, tool="")
    viewer.goto(f"/approvals/{question_id}/")
    card = viewer.page
    expect(card.locator("body")).to_contain_text("Budget exceeded: continue?")
    card.fill("#id_answer", "continue")
    card.click("button#answer")
    expect(card.locator("#decision-result")).to_contain_text(re.compile("answered", re.I))
    expect_status(operator.page, "succeeded")
    operator.assert_same_document()
    assert not operator.console_errors and not viewer.console_errors and not admin.console_errors
