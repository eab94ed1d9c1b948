"""Fork a waiting run from its newest checkpoint in the browser, then replay the original."""

import pytest
from playwright.sync_api import expect

from .pages import RUN_URL, expect_status, launch_refund

pytestmark = pytest.mark.e2e


def test_an_operator_forks_a_run_from_a_checkpoint_and_replays_the_original(server, login):
    operator = login("operator")
    page = operator.page
    # The refund waits for a person.
    origin = launch_refund(operator, order_id=13, amount="20.00", reason="Late")
    expect_status(page, "waiting")
    chain_before = server.query(
        "SELECT seq, hash FROM runs_step WHERE run_id = ? ORDER BY seq", server.key(origin)
    )

    operator.goto(f"/runs/{origin}/")  # the checkpoints list is read with the page
    page.locator("summary", has_text="Checkpoints").click()
    page.locator("a", has_text="Fork from here").first.click()
    expect(page.locator("h1")).to_contain_text("Fork from checkpoint")
    expect(page.locator("body")).to_contain_text("(issue_refund), which the gate policy checks")
    page.fill("#instruction", "Mention the <b>voucher</b> too.")
    page.click("#fork-submit")
    page.wait_for_url(RUN_URL)
    fork = RUN_URL.search(page.url)["id"]
    assert fork != origin
    expect(page.locator("#run-lineage")).to_contain_text("From")
    expect(page.locator(f'#run-lineage a[href="/runs/{origin}/"]')).to_be_visible()
    # The refund the origin was about to make is gated again in the fork.
    expect_status(page, "waiting")
    assert server.query(
        "SELECT tool, status FROM approvals_approval WHERE run_id = ?", server.key(fork)
    ) == [("issue_refund", "pending")]
    assert (
        server.query(
            "SELECT seq, hash FROM runs_step WHERE run_id = ? ORDER BY seq", server.key(origin)
        )
        == chain_before
    )

    operator.goto(f"/runs/{origin}/")
    expect(page.locator(f'#run-lineage a[href="/runs/{fork}/"]')).to_be_visible()
    page.locator("#run-actions a", has_text="Replay").click()
    page.click("#replay-submit")
    expect(page.locator("#replay-result")).to_have_attribute("data-identical", "true")
    expect(page.locator("#replay-result")).to_contain_text("identical")
