"""Model text and tool output are data: markup in them is shown as text and does nothing.

The payloads reach every place such text is shown. A customer and a product in the shop
database carry them, so the lookup_order tool returns them (tool output). The refund reason an
operator types goes into the model's prompt and into the issue_refund arguments (the approval
screen, the gate and tool steps); the approver's rejection reason comes back to the agent as
the tool's error and the scripted model repeats it in its final answer (model text). They
arrive both live over the WebSocket (the htmx WebSocket extension swaps what it receives,
out-of-band swaps included) and in server-rendered pages.
"""

import re
import sqlite3
from contextlib import closing

import pytest
from playwright.sync_api import Page, expect

from .conftest import Session, screenshot
from .pages import decide, expect_status, expect_timeline_complete, launch_refund

pytestmark = pytest.mark.e2e

PROBE = "/xss-probe/"
PAYLOAD = (
    f"<script>fetch('{PROBE}script')</script>"
    f"<img src={PROBE}img onerror=alert('onerror')>"
    f"<button hx-post={PROBE}hx-post hx-trigger=load>hx</button>"
    "<div id=run-status hx-swap-oob=true data-status=pwned>oob</div>"
)
# What the payload would have made of the page, had it been parsed as markup.
INJECTED = (
    "script:not([src]):not([type='application/json']), img[src*=xss-probe], "
    "[hx-post*=xss-probe], [data-status=pwned]"
)


def assert_inert(session: Session, page: Page) -> None:
    assert page.locator(INJECTED).count() == 0, page.locator(INJECTED).evaluate_all(
        "els => els.map(e => e.outerHTML)"
    )
    assert not session.dialogs, session.dialogs
    assert not [url for url in session.requests if PROBE in url], session.requests
    # A CSP refusal would show up here too: the payload must not even be tried as script.
    assert not session.console_errors, session.console_errors


def expect_shown_as_text(page: Page, text: str) -> None:
    shown = page.locator(".untrusted").filter(has_text=text)
    expect(shown.first).to_be_visible()
    for block in shown.all():
        assert block.get_attribute("hx-disable") is not None or block.evaluate(
            "el => el.closest('[hx-disable]') !== null"
        )


@pytest.fixture
def hostile_order(server) -> int:
    """An order whose customer and product names are the payload; returns its id."""
    order_id = 9001
    with closing(sqlite3.connect(server.shop_path)) as shop, shop:
        shop.execute(
            "INSERT OR REPLACE INTO customers VALUES (?, ?, ?, 'FR', '2025-01-01')",
            (9001, PAYLOAD, "hostile@example.com"),
        )
        shop.execute(
            "INSERT OR REPLACE INTO products VALUES (?, ?, 'hardware', 99.0)", (9001, PAYLOAD)
        )
        shop.execute(
            "INSERT OR REPLACE INTO orders VALUES (?, 9001, 9001, 1, 99.0, 'delivered', "
            "'2025-06-01')",
            (order_id,),
        )
    return order_id


def test_markup_in_model_text_and_tool_output_executes_nothing(server, login, hostile_order):
    assert len(PAYLOAD) <= 300  # issue_refund accepts a reason of up to 300 characters

    operator = login("operator")
    run_id = launch_refund(operator, order_id=hostile_order, amount="2.00", reason=PAYLOAD)
    page = operator.page
    expect_status(page, "waiting")
    # The tool's own output: the order, with the customer's and the product's names.
    lookup = page.locator("#timeline .step[data-kind=tool]").first
    expect(lookup).to_contain_text("lookup_order")
    expect(lookup).to_contain_text(PAYLOAD)

    approver = login("approver")
    approval_id = server.pending_approval(run_id)
    approver.goto(f"/approvals/{approval_id}/")
    # The argument as the server parsed it, untouched, in an editable field.
    expect(approver.page.locator("[name=arg_reason]")).to_have_value(PAYLOAD)
    expect_shown_as_text(approver.page, "hx-trigger=load")
    decide(approver, approval_id, "reject", reason=PAYLOAD)

    # Live: the rejection (tool output) and the model's answer quoting it come over the socket.
    expect_status(page, "succeeded")
    expect_timeline_complete(page, server, run_id)
    last_answer = page.locator("#timeline .step[data-kind=llm]").last
    expect(last_answer).to_contain_text(PAYLOAD)
    expect(page.locator("#timeline .step[data-kind=tool]").last).to_contain_text(PAYLOAD)
    expect_shown_as_text(page, PAYLOAD)
    # The last message is in; whatever the payloads would have fired (load triggers, image
    # errors, scripts) has fired once each page has settled.
    operator.settle()
    approver.settle()
    assert_inert(operator, page)
    assert_inert(approver, approver.page)

    # Server-rendered: the same run page, the runs list and the audit view.
    for path in (f"/runs/{run_id}/", "/runs/", "/", f"/audit/runs/{run_id}/"):
        operator.goto(path)
        operator.settle()
        assert_inert(operator, page)
        if path.startswith("/runs/" + run_id):
            expect_shown_as_text(page, PAYLOAD)
            expect(page.locator("#run-status")).to_have_attribute(
                "data-status", re.compile(r"^succeeded$")
            )
            screenshot(page, "untrusted-output")
