"""The revenue check in a browser: the operator launches it and watches the timeline show the
output schema sending the first answer back and the verifier catching the wrong figure, as
steps of their own, before the run succeeds with the recomputed revenue."""

import pytest
from playwright.sync_api import expect

from .pages import RUN_URL, expect_status, expect_timeline_complete, open_launch_form

pytestmark = pytest.mark.e2e


def test_the_checks_of_the_answer_are_steps_in_the_live_timeline(server, login):
    operator = login("operator")
    page = operator.page
    open_launch_form(operator, "revenue-check")
    page.click("button#launch")
    page.wait_for_url(RUN_URL)
    run_id = RUN_URL.search(page.url)["id"]
    expect_status(page, "succeeded")
    expect_timeline_complete(page, server, run_id)

    timeline = page.locator("#timeline")
    guards, verifies = timeline.locator("[data-kind=guard]"), timeline.locator("[data-kind=verify]")
    expect(guards).to_have_count(3)
    expect(verifies).to_have_count(2)
    expect(guards.first).to_contain_text("guard: final answer invalid")
    expect(guards.first).to_contain_text("the answer is not JSON")
    expect(verifies.first).to_contain_text("verification failed: revenue recomputed")
    expect(verifies.first).to_contain_text("sent back to the agent")
    expect(verifies.last).to_contain_text("verification passed")
    ((output,),) = server.query("SELECT output FROM runs_run WHERE id = ?", server.key(run_id))
    assert output.startswith('{"revenue": ')
    expect(page.locator("#run-header .output")).to_contain_text(output)
