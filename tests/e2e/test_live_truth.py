"""Screens that never lie: an approval card is true after a reconnect and after someone else
decides, every live page says whether it is live, and the decision is on the first screen."""

import pytest
from playwright.sync_api import Page, expect

from .conftest import screenshot
from .pages import decide, expect_status, launch_refund

pytestmark = pytest.mark.e2e

FIRST_SCREEN = ("#original-args", "#call-effect", "#on-expiry", "#approve", "#reject")


def expect_decided(page: Page, approval_id: str, status: str, by: str) -> None:
    """The card says who decided, and nothing on it invites a decision any more."""
    state = page.locator(f"#approval-state-{approval_id} [data-final]")
    expect(state).to_have_attribute("data-final", status)
    expect(state).to_contain_text(f"by {by}")
    for button in ("#approve", "#reject"):
        expect(page.locator(button)).to_be_disabled()
    expect(page.locator(".presence form.claim")).to_be_hidden()


def off_screen(page: Page, selectors: tuple[str, ...]) -> list[str]:
    """The selectors not wholly inside the viewport as the page first shows it."""
    return page.evaluate(
        """sels => sels.filter(s => {
            const el = document.querySelector(s);
            if (!el) return true;
            const r = el.getBoundingClientRect();
            return !(r.height > 0 && r.top >= 0 && r.bottom <= window.innerHeight);
        })""",
        list(selectors),
    )


def test_a_card_decided_while_its_socket_was_down_shows_the_outcome_on_reconnect(
    server, login, proxy
):
    operator = login("operator")
    run_id = launch_refund(operator, order_id=31, amount="9.00", reason="Dented box")
    expect_status(operator.page, "waiting")
    refund = server.pending_approval(run_id)

    # The approver's browser goes through a relay that can cut the network (a restart).
    approver = login("approver", via=proxy.url)
    page = approver.page
    approver.goto(f"/approvals/{refund}/")
    live = page.locator("#live-status")
    expect(live).to_have_attribute("data-state", "live")
    # Reconnects come within a few seconds, however many attempts failed before.
    delays = page.evaluate("[0, 1, 2, 5, 10, 50].map(n => htmx.config.wsReconnectDelay(n))")
    assert all(0 < d <= 4000 for d in delays), delays

    # Presence: the admin opens it too and says "I'm on it"; the approver sees both.
    admin = login("admin")
    admin.goto(f"/approvals/{refund}/")
    expect(page.locator(f"#approval-presence-{refund} [data-user=admin]")).to_be_visible()
    admin.page.click("#claim")
    expect(admin.page.locator("#release")).to_be_visible()
    expect(page.locator(f"#approval-presence-{refund} .viewer.claimed")).to_have_text(
        "admin is on it"
    )
    approver.mark_document()

    proxy.down()
    expect(live).to_have_attribute("data-state", "reconnecting")
    expect(live).to_be_visible()
    # The claim blocks nobody: the admin decides while the approver's socket is down.
    decide(admin, refund, "reject", reason="Photo shows no dent", navigate=False)
    expect(page.locator("#approve")).to_be_enabled()  # nothing reached the approver yet

    proxy.up()
    expect(live).to_have_attribute("data-state", "live-again")
    expect_decided(page, refund, "rejected", "admin")
    expect(page.locator(f"#approval-state-{refund}")).to_contain_text("Photo shows no dent")
    expect(live).to_have_attribute("data-state", "live")
    approver.assert_same_document()


def test_a_decision_made_elsewhere_turns_controls_off_live_and_fits_the_first_screen(server, login):
    operator = login("operator")
    run_id = launch_refund(operator, order_id=32, amount="689.00", reason="Arrived damaged")
    expect_status(operator.page, "waiting")
    refund = server.pending_approval(run_id)

    approver = login("approver")
    page = approver.page
    for width, height, name in ((1366, 768, "laptop"), (390, 844, "phone")):
        page.set_viewport_size({"width": width, "height": height})
        approver.goto(f"/approvals/{refund}/")
        expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
        assert off_screen(page, FIRST_SCREEN) == [], f"below the fold at {width}x{height}"
        assert page.evaluate("window.scrollY") == 0
        screenshot(page, f"approval-first-screen-{name}")
    # The exact call is typed as the tool receives it: the amount is a number, not a string.
    args = page.locator("#original-args").inner_text()
    assert '"amount": 689.00' in args and '"order_id": 32' in args, args
    # The expiry is said once, where the decision is made.
    expect(page.get_by_text("If nobody decides by")).to_have_count(1)

    # Another approver decides while the screen is open: its controls go off at once, with
    # who decided, without a reload.
    approver.mark_document()
    decide(login("admin"), refund, "reject", reason="Too much")
    expect_decided(page, refund, "rejected", "admin")
    approver.assert_same_document()
