"""The approval card shows what a refund would change (before / after, escaped); when the
data changes before the approver decides (another refund of the same order lands), the
approve click says "changed since you looked" with the new diff, and nothing is refunded
until they approve what they now see."""

import re
from decimal import Decimal

import pytest
from playwright.sync_api import expect

from .conftest import screenshot
from .pages import decide, launch_refund

pytestmark = pytest.mark.e2e

ORDER = 19  # no other browser test refunds it


def refunded_row(page):
    return page.locator("#effect-preview table.preview-diff").first.locator(
        "tr", has=page.locator("th", has_text="refunded")
    )


def wait_for_refund(server, page, run_id: str) -> None:
    """The worker runs an approved refund soon after the decision: the database says when."""
    for _ in range(300):
        if server.refunds(run_id):
            return
        page.wait_for_timeout(50)


def test_a_refund_whose_order_changed_since_the_card_was_opened_is_not_approved_blind(
    server, login
):
    operator = login("operator")
    first = launch_refund(operator, order_id=ORDER, amount="5.00", reason="Late")
    second = launch_refund(operator, order_id=ORDER, amount="3.00", reason="Scratched")
    first_approval = server.pending_approval(first)
    second_approval = server.pending_approval(second)

    approver = login("approver")
    card = approver.page
    approver.goto(f"/approvals/{first_approval}/")
    preview = card.locator("#effect-preview")
    expect(preview.locator("caption").first).to_have_text(f"order {ORDER}")
    before = Decimal(refunded_row(card).locator("td.before").inner_text())
    expect(refunded_row(card).locator("td.after")).to_have_text(f"{before + Decimal('5.00'):.2f}")
    expect(preview.locator("caption").nth(1)).to_contain_text("new refund")
    screenshot(card, "approval-effect-preview")

    # Meanwhile another approver's tab approves the other refund of the same order.
    other = login("approver")
    decide(other, second_approval, "approve")
    wait_for_refund(server, card, second)
    assert server.refunds(second) == [(ORDER, Decimal("3.00"), "Scratched")]

    # The approver, on the card as they opened it, presses Approve.
    card.click("button#approve")
    result = card.locator("#decision-result")
    expect(result).to_contain_text("Changed since you looked")
    expect(card.locator("#effect-preview[data-changed] .changed-since")).to_be_visible()
    now = before + Decimal("3.00")
    expect(refunded_row(card).locator("td.before")).to_have_text(f"{now:.2f}")
    expect(refunded_row(card).locator("td.after")).to_have_text(f"{now + Decimal('5.00'):.2f}")
    screenshot(card, "approval-effect-preview-changed")
    assert server.refunds(first) == []

    # They approve what they now see: the refund runs, once.
    decide(approver, first_approval, "approve", navigate=False)
    expect(result).to_contain_text(re.compile("approved", re.I))
    wait_for_refund(server, card, first)
    assert server.refunds(first) == [(ORDER, Decimal("5.00"), "Late")]
