"""Deciding from the approval e-mail on a phone: the one-tap link, a login that comes back
to it, the card on a narrow screen, the password for a high-risk call, a link that works
once."""

import re
import time
from decimal import Decimal

import pytest
from playwright.sync_api import expect

from .conftest import LIVE_TIMEOUT_MS, PASSWORD, LiveServer, screenshot
from .pages import expect_status, launch_refund

pytestmark = pytest.mark.e2e

PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True}
LINK = re.compile(r"https?://[^/\s]+(/approvals/link/\S+/)")


def one_tap_link(server: LiveServer, approval_id: str, address: str) -> str:
    """The path of the one-tap link e-mailed to `address` for this approval (the demo outbox)."""
    deadline = time.monotonic() + LIVE_TIMEOUT_MS / 1000
    while True:
        rows = server.query(
            "SELECT body FROM demo_outboxemail WHERE body LIKE ? AND body LIKE ?",
            f"%/approvals/{approval_id}/%",
            f"%one-time link for {address.split('@')[0]} only%",
        )
        if rows or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert len(rows) == 1, rows
    return LINK.search(rows[0][0])[1]


def no_sideways_scroll(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_an_approver_decides_from_the_email_on_a_phone(server, browser, login):
    operator = login("operator")
    run_id = launch_refund(operator, order_id=8, amount="14.00", reason="Never arrived")
    expect_status(operator.page, "waiting")
    approval_id = server.pending_approval(run_id)
    link = one_tap_link(server, approval_id, "approver@agentops.localhost")

    # Someone else (here the admin, signed in) cannot use the approver's link.
    admin = login("admin")
    refused = admin.page.goto(link)
    assert refused is not None and refused.status == 403
    expect(admin.page.locator("#one-tap-refused")).to_contain_text("another approver")

    phone = browser.new_context(base_url=server.url, **PHONE)
    try:
        page = phone.new_page()
        page.goto(link)
        # Not signed in on the phone: the login page, then back to the link.
        page.wait_for_url("**/accounts/login/**")
        page.fill("#id_username", "approver")
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(f"**{link}")
        expect(page.locator("#one-tap-effect")).to_contain_text("Refund 14.00 on order 8")
        expect(page.locator("#one-tap-args")).to_contain_text("Never arrived")
        assert no_sideways_scroll(page)
        approve = page.locator("#one-tap-approve")
        assert approve.bounding_box()["height"] >= 44  # a thumb-sized target
        screenshot(page, "one-tap-phone")

        # A high-risk, irreversible call: the password again, or nothing is decided.
        approve.tap()
        expect(page.locator("#one-tap-result")).to_contain_text("enter your password")
        assert server.query(
            "SELECT status FROM approvals_approval WHERE id = ?", server.key(approval_id)
        ) == [("pending",)]
        page.fill("#id_password", PASSWORD)
        page.locator("#one-tap-approve").tap()
        expect(page.locator("#one-tap-result")).to_contain_text("Approved.")
        assert no_sideways_scroll(page)

        # The link is spent: opening it again decides nothing and says why.
        page.goto(link)
        expect(page.locator("#one-tap-refused")).to_contain_text("already used")

        # The refund ran; its customer e-mail waits at its own gate, rejected from its link.
        email_approval = server.pending_approval(run_id, tool="send_customer_email")
        page.goto(one_tap_link(server, email_approval, "approver@agentops.localhost"))
        page.fill("#id_reason", "I will write to the customer myself")
        page.locator("#one-tap-reject").tap()
        expect(page.locator("#one-tap-result")).to_contain_text("Rejected.")
    finally:
        phone.close()
    server.wait_for_status(run_id, "succeeded")
    assert server.refunds(run_id) == [(8, Decimal("14.00"), "Never arrived")]
