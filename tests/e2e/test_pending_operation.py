"""A run that waits for a supplier's reply: the operator watches it wait, the reply arrives
through the callback URL the agent e-mailed, and the page shows the run finish, live."""

import json
import re
import urllib.request

import pytest
from playwright.sync_api import expect

from .pages import RUN_URL, expect_status, open_launch_form

pytestmark = pytest.mark.e2e


def test_the_reply_through_the_callback_url_resumes_the_run_live(server, login):
    operator = login("operator")
    page = operator.page
    open_launch_form(operator, "supplier-quote")
    page.fill("[name=supplier]", "sales@bolts.example")
    page.fill("[name=quantity]", "250")
    page.click("button#launch")
    page.wait_for_url(RUN_URL)
    run_id = RUN_URL.search(page.url)["id"]
    expect_status(page, "waiting")
    operator.mark_document()

    # What it awaits is on the page, with since/deadline, and an operator may mark it done.
    row = page.locator("#pending-ops tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_have_attribute("data-status", "open")
    expect(row).to_contain_text("sales@bolts.example's quote for 250 x")
    expect(row.locator("button", has_text="Mark done")).to_be_visible()

    # The supplier's system posts the reply to the URL from the e-mail.
    # The newest: the suite's server may hold quote requests of earlier tests (test_steering).
    (body,) = server.query(
        "SELECT body FROM demo_outboxemail WHERE subject LIKE ? ORDER BY created_at DESC LIMIT 1",
        "Quote request%",
    )
    url = re.search(r"(http\S+/api/pending/\S+)", body[0])[1]
    url = server.url + url[url.index("/api/pending/") :]
    reply = json.dumps({"result": {"unit_price": "0.31", "currency": "EUR"}}).encode()
    request = urllib.request.Request(
        url, reply, {"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert json.load(response)["status"] == "completed"

    expect_status(page, "succeeded")
    expect(page.locator("#run-header .output")).to_contain_text("quotes 0.31 EUR per unit")
    expect(page.locator("#timeline")).to_contain_text("completed")
    expect(row).to_have_attribute("data-status", "completed")
    expect(row).to_contain_text("by callback")
    expect(row.locator("button")).to_have_count(0)
    operator.assert_same_document()
    assert server.run_status(run_id) == "succeeded"
