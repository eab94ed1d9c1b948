"""The approval card in a real browser: the evidence the agent had, the effect a high-risk
approve confirms, and untrusted text with its hidden characters made visible.

Issue 13: an approver approved a refund of 600 on an order whose total (from the agent's own
lookup) sat in a collapsed step; and `\u202eevil\u202c@example.com` in free text displayed as
"live@example.com".
"""

import json
import re
import sqlite3
from contextlib import closing

import pytest
from playwright.sync_api import expect

from .conftest import screenshot
from .pages import expect_status, launch_refund

pytestmark = pytest.mark.e2e

SPOOFED_NAME = "\u202eevil\u202c@example.com zero\u200bwidth"


def test_the_card_shows_the_lookup_and_a_high_risk_approve_confirms_its_effect(server, login):
    operator = login("operator")
    run_id = launch_refund(operator, order_id=42, amount="600", reason="Arrived damaged")
    expect_status(operator.page, "waiting")
    approval_id = server.pending_approval(run_id)

    approver = login("approver")
    approver.goto(f"/approvals/{approval_id}/")
    page = approver.page
    # The lookup the agent made just before the gate is on the card, expanded, newest first.
    items = page.locator("#evidence .evidence-item")
    expect(items.first).to_contain_text("the model said")
    lookup = items.filter(has_text="lookup_order returned")
    expect(lookup).to_have_count(1)
    expect(lookup.locator("pre")).to_be_visible()
    order = json.loads(lookup.locator("pre").inner_text())
    assert order["id"] == 42 and "total" in order
    seqs = [int(s) for s in items.evaluate_all("els => els.map(e => e.dataset.seq)")]
    assert seqs == sorted(seqs, reverse=True)
    # Said once, where the decision is made (the decision bar), not again under the evidence.
    expect(page.locator("#on-expiry")).to_contain_text("If nobody decides by")
    expect(page.locator("#call-effect")).to_contain_text("Refund 600.00 on order 42")
    screenshot(page, "approval-evidence")

    # Approve is not the default-looking button; pressing it decides nothing yet.
    approve = page.locator("button#approve")
    expect(approve).not_to_have_class(re.compile(r"\bapprove\b"))
    approve.click()
    confirm = page.locator("#confirm-approve")
    expect(confirm).to_be_visible()
    expect(page.locator("#confirm-effect")).to_have_text("Refund 600.00 on order 42")
    expect(confirm).to_be_focused()
    screenshot(page, "approval-confirm")
    assert server.query(
        "SELECT status FROM approvals_approval WHERE id = ?", server.key(approval_id)
    ) == [("pending",)]
    assert server.run_status(run_id) == "waiting"

    # "Not now" takes the question away; still nothing decided.
    page.click("#confirm-cancel")
    expect(confirm).to_have_count(0)
    assert server.query(
        "SELECT status FROM approvals_approval WHERE id = ?", server.key(approval_id)
    ) == [("pending",)]

    # Two keys: a, then Enter on the focused confirmation.
    page.locator("h1").click()
    page.keyboard.press("a")
    expect(confirm).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("#decision-outcome")).to_contain_text("Approved")
    expect(confirm).to_have_count(0)
    assert server.query(
        "SELECT status FROM approvals_approval WHERE id = ?", server.key(approval_id)
    ) == [("approved",)]
    for button in ("approve", "reject"):
        expect(page.locator(f"button#{button}")).to_be_disabled()
    assert not approver.console_errors and not operator.console_errors


@pytest.fixture
def spoofed_order(server) -> int:
    """An order whose customer's name hides a right-to-left override and a zero-width space."""
    order_id = 9101
    with closing(sqlite3.connect(server.shop_path)) as shop, shop:
        shop.execute(
            "INSERT OR REPLACE INTO customers VALUES (?, ?, ?, 'FR', '2025-01-01')",
            (9101, SPOOFED_NAME, "spoof@example.com"),
        )
        shop.execute(
            "INSERT OR REPLACE INTO orders VALUES (?, 9101, 1, 1, 99.0, 'delivered', '2025-06-01')",
            (order_id,),
        )
    return order_id


def test_bidi_and_zero_width_characters_are_visibly_marked(server, login, spoofed_order):
    operator = login("operator")
    run_id = launch_refund(operator, order_id=spoofed_order, amount="5", reason="Late")
    expect_status(operator.page, "waiting")
    approval_id = server.pending_approval(run_id)

    approver = login("approver")
    pages = {
        "approval": f"/approvals/{approval_id}/",
        "run": f"/runs/{run_id}/",
        "audit": f"/audit/runs/{run_id}/",
    }
    for name, path in pages.items():
        approver.goto(path)
        page = approver.page
        scope = page.locator("#evidence" if name == "approval" else "#timeline")
        if name != "approval":
            # The step's line says it hides characters and comes unfolded; inside, the long
            # result is folded and its summary says so too.
            expect(scope.locator(".step-fold:has(.hidden-chars-flag)").first).to_have_attribute(
                "open", ""
            )
            flagged = scope.locator("details:not(.step-fold):has(.hidden-chars-flag) > summary")
            expect(flagged.first).to_contain_text("contains hidden characters")
            for summary in flagged.all():
                summary.click()
        override = scope.locator(".invisible-char[title^='U+202E RIGHT-TO-LEFT OVERRIDE']")
        expect(override.first).to_be_visible()
        expect(override.first).to_have_text("\u27e8U+202E\u27e9")
        expect(scope.locator(".invisible-char[title^='U+200B']").first).to_be_visible()
        # The characters themselves are gone from what is shown: nothing is reordered.
        text = scope.inner_text()
        assert "\u202e" not in text and "\u200b" not in text, name
        assert "\u27e8U+202E\u27e9evil\u27e8U+202C\u27e9@example.com" in text, name
        screenshot(page, f"invisible-chars-{name}")
    # Live: the operator's page received the lookup step over the WebSocket, marked too.
    live = operator.page.locator("#timeline .invisible-char[title^='U+202E']")
    expect(live.first).to_be_attached()
    assert not approver.console_errors and not operator.console_errors
