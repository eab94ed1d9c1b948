"""An approver grants "the rest of this run" from a card: the next matching call runs without a
card and the operator's timeline says "approved by grant #n"; revoked on the grants page, the
next call comes to a card again. The goodwill round asks "continue?" between its credits, which
is where the revoke happens."""

import re

import pytest
from playwright.sync_api import expect

from .conftest import screenshot
from .pages import RUN_URL, decide, expect_status, expect_timeline_complete, open_launch_form

pytestmark = pytest.mark.e2e
CREDIT = "grant_goodwill_credit"


def test_a_grant_lets_the_next_call_through_until_it_is_revoked(server, login):
    operator = login("operator")
    open_launch_form(operator, "goodwill-round")
    operator.page.click("button#launch")
    operator.page.wait_for_url(RUN_URL)
    run_id = RUN_URL.search(operator.page.url)["id"]
    page = operator.page
    expect_status(page, "waiting")

    # The first credit waits at its card; the approver approves it with a grant.
    first = server.pending_approval(run_id, tool=CREDIT)
    approver = login("approver")
    card = approver.page
    approver.goto(f"/approvals/{first}/")
    expect(card.locator("#grant-form")).to_be_visible()
    card.check("#grant-form input[name=kind][value=run]")
    screenshot(card, "approval-grant")
    card.click("#grant-approve")
    card.wait_for_url(f"**/approvals/{first}/#grants")
    (grant_id,) = server.query(
        "SELECT id FROM approvals_grant WHERE from_approval_id = ?", server.key(first)
    )[0]
    expect(card.locator(f"#applying-grants [data-grant-id='{grant_id}']")).to_contain_text(
        "by approver"
    )

    # The second credit runs without a card: its gate step says by which grant, live.
    granted = page.locator("#timeline .step[data-kind=gate]", has_text=f"grant #{grant_id}")
    expect(granted).to_have_count(1)
    expect(granted).to_contain_text(f"approved by grant #{grant_id} (by approver)")
    # Then the round asks whether to go on.
    question = server.pending_approval(run_id, tool="")
    expect_status(page, "waiting")
    assert server.query(
        "SELECT COUNT(*) FROM approvals_approval WHERE run_id = ? AND grant_id = ?",
        server.key(run_id),
        grant_id,
    ) == [(1,)]

    # Revoked on the grants page...
    approver.goto("/approvals/grants/")
    row = card.locator(f"#grant-{grant_id}")
    expect(row).to_have_attribute("data-state", "active")
    screenshot(card, "grants")
    row.locator("button.revoke-grant").click()
    expect(card.locator(f"#grant-{grant_id}")).to_have_attribute("data-state", "ended")
    expect(card.locator(f"#grant-{grant_id}")).to_contain_text("revoked by approver")

    # ...so after "continue" the third credit comes to a card again.
    approver.goto(f"/approvals/{question}/")
    card.fill("#id_answer", "continue")
    card.click("button#answer")
    expect(card.locator("#decision-result")).to_contain_text(re.compile("answered", re.I))
    third = server.pending_approval(run_id, tool=CREDIT)
    gated = page.locator("#timeline .step[data-kind=gate]", has_text="gated: waiting for a human")
    expect(gated).to_have_count(2)
    expect(granted).to_have_count(1)
    approver.goto(f"/approvals/{third}/")
    expect(card.locator("#applying-grants")).to_have_count(0)
    decide(approver, third, "approve", navigate=False)

    expect_status(page, "succeeded")
    expect(page.locator("#run-output, main")).to_contain_text("3 of 3 credits granted")
    expect_timeline_complete(page, server, run_id)
    assert not operator.console_errors and not approver.console_errors, (
        operator.console_errors,
        approver.console_errors,
    )
