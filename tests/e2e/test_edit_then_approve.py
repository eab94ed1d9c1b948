"""Edit an argument, then reach for the green Approve: nothing runs until Edit and approve.

The hazard of issue 13: with the amount changed on screen, Approve used to approve and execute
the original amount silently. Now Approve is off while a field differs, a forced submit of it
is refused by the server (neither amount is refunded), Edit and approve refunds the edited
amount, and the outcome is announced next to buttons that no longer press.
"""

import re
from decimal import Decimal

import pytest
from playwright.sync_api import expect

from .conftest import screenshot
from .pages import decide, expect_status, launch_refund

pytestmark = pytest.mark.e2e


def test_approve_is_off_after_an_edit_and_only_edit_and_approve_runs_the_edit(server, login):
    operator = login("operator")
    run_id = launch_refund(operator, order_id=21, amount="4.00", reason="Scratched lid")
    expect_status(operator.page, "waiting")
    approval_id = server.pending_approval(run_id)

    approver = login("approver")
    with approver.page.expect_response(lambda r: r.url.endswith("/opened/")) as opened:
        approver.goto(f"/approvals/{approval_id}/")
    # The screen reported that the approver opened it (time to decide counts from there).
    assert opened.value.status == 204
    assert server.query(
        "SELECT count(*) FROM approvals_approvalview WHERE approval_id = ?", server.key(approval_id)
    ) == [(1,)]
    page = approver.page
    approve, edit = page.locator("button#approve"), page.locator("button#edit-approve")
    expect(approve).to_be_enabled()
    # An irreversible refund: Approve is not the default-looking button (it asks to confirm).
    expect(approve).not_to_have_class(re.compile(r"\bapprove\b"))

    page.fill("[name=arg_amount]", "2.50")
    # Approve is off at once; Edit and approve becomes the primary action.
    expect(approve).to_be_disabled()
    expect(page.locator("#approve-blocked")).to_be_visible()
    expect(edit).to_have_class(re.compile(r"\bapprove\b"))
    expect(approve).not_to_have_class(re.compile(r"\bapprove\b"))
    # The diff is the server's parse of the field, swapped in by htmx.
    change = page.locator("#arg-diff li[data-arg=amount]")
    expect(change.locator("del")).to_have_text("4.00")
    expect(change.locator("ins")).to_have_text("2.50")
    expect(page.locator("#arg-diff")).to_have_attribute("data-valid", "true")
    expect(edit).to_be_enabled()

    # The keyboard shortcut cannot press a disabled Approve.
    page.locator("#id_reason").focus()
    page.locator("h1").click()
    page.keyboard.press("a")
    # Forcing the disabled button and submitting the form with the edited values: refused.
    with page.expect_response(lambda r: r.url.endswith(f"/approvals/{approval_id}/decide/")) as r:
        page.evaluate(
            "() => { const b = document.getElementById('approve'); b.disabled = false; b.click(); }"
        )
    assert r.value.status == 422
    result = page.locator("#decision-result")
    expect(result).to_contain_text("Not approved: you changed amount but pressed Approve")
    expect(result).to_contain_text("Nothing was executed")
    assert server.query(
        "SELECT status, edited_args FROM approvals_approval WHERE id = ?", server.key(approval_id)
    ) == [("pending", None)]
    assert server.refunds(run_id) == []
    assert server.run_status(run_id) == "waiting"
    # The refusal leaves the decision open: Approve is still off, Edit and approve still on.
    expect(approve).to_be_disabled()
    expect(edit).to_be_enabled()
    expect(page.locator("#decision-buttons button#reject")).to_be_enabled()
    screenshot(page, "approval-edit-refused")

    # Back in the field, then Edit and approve straight from it (no click elsewhere first):
    # leaving the field re-runs the preview, and the press waits for it instead of being lost.
    page.fill("[name=arg_amount]", "2.5")
    edit.click()
    outcome = page.locator("#decision-outcome")
    expect(outcome).to_contain_text(re.compile("Approved with your edits"))
    # The outcome is announced and sits right under the buttons, in view.
    expect(outcome).to_have_attribute("role", "status")
    expect(outcome).to_have_attribute("aria-live", "polite")
    expect(outcome).to_be_in_viewport()
    buttons_box = page.locator("#decision-buttons").bounding_box()
    outcome_box = outcome.bounding_box()
    assert buttons_box and outcome_box
    assert 0 <= outcome_box["y"] - (buttons_box["y"] + buttons_box["height"]) < 80
    # Nothing is left to press.
    for button in ("approve", "edit-approve", "reject"):
        expect(page.locator(f"button#{button}")).to_be_disabled()

    # The customer e-mail is gated too; approve it and the run ends with the edited refund.
    email = server.pending_approval(run_id, tool="send_customer_email")
    decide(approver, email, "approve")
    expect(page.locator("button#approve")).to_be_disabled()
    expect_status(operator.page, "succeeded")
    assert server.refunds(run_id) == [(21, Decimal("2.50"), "Scratched lid")]
    # The browser logs the refused submit's 422 as a failed load; nothing else may fail.
    refused = [e for e in approver.console_errors if "status of 422" in e and "/decide/" in e]
    assert len(refused) == 1, approver.console_errors
    assert not operator.console_errors and approver.console_errors == refused
