"""Steering a live run from its page, in a real browser: pause a run (it pauses when it next
works), send its agent an instruction while it is paused, resume it, and see the instruction
reach the agent; and a failed step that waits for an operator, retried with edited arguments.
Everything is seen live, without a reload."""

import json

import pytest
from playwright.sync_api import expect

from .conftest import screenshot
from .pages import RUN_URL, expect_status, open_launch_form

pytestmark = pytest.mark.e2e


def test_pause_then_instruct_then_resume(server, login):
    operator = login("operator")
    viewer = login("approver")  # watches the same run: the section comes to them too
    page = operator.page
    open_launch_form(operator, "supplier-quote")
    page.fill("[name=supplier]", "sales@bolts.example")
    page.fill("[name=quantity]", "100")
    page.click("button#launch")
    page.wait_for_url(RUN_URL)
    run_id = RUN_URL.search(page.url)["id"]
    expect_status(page, "waiting")  # for the supplier's reply
    operator.mark_document()
    viewer.goto(f"/runs/{run_id}/")

    # Asked while it waits: taken when it next works. A double click asks once.
    steer = page.locator("#run-steer")
    page.click("#pause-run")
    expect(steer.locator("#pause-asked")).to_contain_text("Pause asked by operator")
    expect(steer.locator("#resume-run")).to_have_text("Withdraw the pause")

    # The reply comes: the run is resumed for it, and pauses at its first step boundary.
    row = page.locator("#pending-ops tbody tr")
    row.locator("[name=result]").fill(json.dumps({"unit_price": "0.40", "currency": "EUR"}))
    row.locator("button", has_text="Mark done").click()
    expect(steer.locator("#paused-by")).to_contain_text("Paused by operator at ")
    expect(page.locator("#run-header")).to_contain_text("paused by operator at ")
    expect(viewer.page.locator("#run-steer #paused-by")).to_contain_text("Paused by operator")
    expect(viewer.page.locator("#run-steer #resume-run")).to_have_count(0)  # not theirs
    expect(steer.locator("#resume-run")).to_have_text("Resume")
    assert server.run_status(run_id) == "waiting"

    # An instruction while paused waits for the next model turn; Resume lets it through.
    page.fill("#instruction-text", "Ask for delivery in EU-WEST. <b>not bold</b>")
    page.click("#send-instruction")
    pending = steer.locator("#instructions li").first
    expect(pending).to_have_attribute("data-delivered", "no")
    expect(pending).to_contain_text("<b>not bold</b>")  # shown as text, escaped
    screenshot(page, "run-paused-with-instruction")
    page.click("#resume-run")
    expect_status(page, "succeeded")
    expect(page.locator("#run-header .output")).to_contain_text("quotes 0.40 EUR per unit")
    step = page.locator("#timeline .step", has_text="operator: instruction to the agent")
    expect(step).to_have_count(1)
    expect(page.locator("#run-steer #instructions li").first).to_have_attribute(
        "data-delivered", "yes"
    )
    operator.assert_same_document()
    (row,) = server.query(
        "SELECT delivered_seq FROM runs_instruction WHERE run_id = ?", server.key(run_id)
    )
    assert row[0] is not None
    assert not operator.console_errors


def test_a_failed_step_is_retried_with_edited_arguments(server, login):
    operator = login("operator")
    page = operator.page
    open_launch_form(operator, "dispatch-desk")
    page.fill("[name=order_id]", "13")
    page.click("button#launch")
    page.wait_for_url(RUN_URL)
    run_id = RUN_URL.search(page.url)["id"]
    expect_status(page, "waiting")
    recovery = page.locator("#run-steer #recovery")
    expect(recovery).to_contain_text("schedule_dispatch")
    expect(recovery).to_contain_text("US-EAST is closed for stocktaking")
    expect(page.locator("#timeline")).to_contain_text("failed, held for an operator's choice")
    operator.mark_document()
    screenshot(page, "run-failed-step-choice")

    args = json.loads(page.locator("#recovery-arguments").input_value())
    assert args == {"order_id": 13, "warehouse": "US-EAST"}
    page.fill("#recovery-arguments", json.dumps({**args, "warehouse": "EU-WEST"}))
    page.click("#recovery-retry")
    expect_status(page, "succeeded")
    expect(page.locator("#run-header .output")).to_contain_text(
        "from EU-WEST, not US-EAST as first asked"
    )
    expect(
        page.locator("#timeline .step", has_text="operator: retry the failed call")
    ).to_contain_text("EU-WEST")
    expect(page.locator("#run-steer #recovery")).to_have_count(0)
    operator.assert_same_document()
    assert server.run_status(run_id) == "succeeded"
    assert not operator.console_errors
