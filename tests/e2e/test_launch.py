"""The launch form: the agent's own typed form, inline errors, limit overrides, then cancel."""

import re

import pytest
from playwright.sync_api import expect

from .pages import RUN_URL, expect_status, open_launch_form

pytestmark = pytest.mark.e2e


def test_the_launch_form_refuses_bad_input_inline_then_launches_within_the_limits(server, login):
    operator = login("operator")
    page = operator.page
    runs_before = server.query("SELECT COUNT(*) FROM runs_run")

    open_launch_form(operator, "refund-desk")
    page.fill("[name=order_id]", "0")
    page.fill("[name=reason]", "Never arrived")
    page.click("button#launch")
    expect(page.locator(".has-error [name=order_id]")).to_be_visible()
    expect(page.locator(".field-error").first).to_contain_text("greater than or equal to 1")

    # The agent's limits may be raised only up to its declared bounds.
    page.fill("[name=order_id]", "23")
    page.locator("details.limits summary").click()
    page.fill("[name=limit_max_steps]", "5000")
    page.click("button#launch")
    expect(page.locator(".has-error [name=limit_max_steps]")).to_be_visible()
    expect(page.locator(".field-error").first).to_contain_text("at most 200")
    assert "/runs/new/" in page.url
    assert server.query("SELECT COUNT(*) FROM runs_run") == runs_before

    if not page.locator("[name=limit_max_steps]").is_visible():
        page.locator("details.limits summary").click()
    page.fill("[name=limit_max_steps]", "6")
    page.click("button#launch")
    page.wait_for_url(RUN_URL)
    run_id = RUN_URL.search(page.url)["id"]
    assert server.query("SELECT max_steps FROM runs_run WHERE id = ?", server.key(run_id)) == [(6,)]
    expect_status(page, "waiting")
    expect(page.locator("#run-header")).to_contain_text(re.compile(r"steps\s+\d+ / 6(?!\d)"))

    # An operator may stop a run that waits for a person; the page says so without a reload.
    # Cancelling asks first (hx-confirm): dismissed, nothing happens; accepted, it cancels.
    operator.mark_document()
    operator.dialog_answers[:] = [False, True]
    page.click("button#cancel-run")
    operator.settle()
    assert server.run_status(run_id) == "waiting"
    expect_status(page, "waiting")
    page.click("button#cancel-run")
    assert len(operator.dialogs) == 2 and "cannot be resumed" in operator.dialogs[0]
    expect_status(page, "cancelled")
    operator.assert_same_document()
    server.wait_for_status(run_id, "cancelled")
    expect(page.locator("#timeline .step").last).to_contain_text("cancelled")
    # The controls follow the run (pushed with its last step): no Cancel on a finished run.
    expect(page.locator("#cancel-run")).to_have_count(0)
    expect(page.locator("#run-actions")).to_contain_text("Export JSON")
    # The browser logs the two refused submissions (422 Unprocessable); nothing else.
    refused = [e for e in operator.console_errors if "status of 422" in e]
    assert len(refused) == 2 and len(operator.console_errors) == 2, operator.console_errors
