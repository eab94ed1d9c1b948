"""A trace an operator can read at 500 steps: one line per step, filter, search, jump, and a
live page that stays bounded."""

import pytest
from playwright.sync_api import expect

from .conftest import screenshot

pytestmark = pytest.mark.e2e

SEED = """
from datetime import timedelta
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from runs.models import Run, Step
from tests.runs.factories import add_steps, make_run

# Running under a lease nobody lets go: the live server's worker and sweep leave it alone
# (a queued run would be picked up and advanced by the scripted model meanwhile).
run = make_run(get_user_model().objects.get(username="operator"), status=Run.Status.RUNNING,
    lease_owner="e2e-seed", lease_expires_at=timezone.now() + timedelta(hours=1))
add_steps(run, 20)
with transaction.atomic():
    locked = Run.locked(run.pk)
    locked.append_step(Step.Kind.GATE, {"tool": "email_report", "risk": "medium",
        "args": {"to": "needle@example.com"}, "explanation": "an e-mail leaves the company"})
    locked.append_step(Step.Kind.TOOL, {"tool": "run_query", "args": {}, "is_error": True,
        "error": "relation does not exist", "attempts": 1, "duration_ms": 4200})
add_steps(run, 440)
with transaction.atomic():
    Run.locked(run.pk).append_step(Step.Kind.TOOL, {"tool": "run_query", "args": {},
        "is_error": True, "error": "timeout", "attempts": 2, "duration_ms": 9000})
add_steps(run, 37)
print(run.pk)
"""


def test_a_500_step_run_reads_as_lines_with_filter_search_and_jump(server, login):
    run_id = server.up.manage(SEED).strip().splitlines()[-1]
    operator = login("operator")
    page = operator.page
    page.set_viewport_size({"width": 1366, "height": 768})
    operator.goto(f"/runs/{run_id}/")
    steps = page.locator("#timeline .step")
    expect(steps).to_have_count(50)
    # One line per step, folded: 50 steps fit in a few screens, not 84 000 px.
    line = page.locator("#timeline .step[data-kind=llm] summary").first
    assert line.bounding_box()["height"] < 40
    assert page.evaluate("document.getElementById('timeline').offsetHeight") < 50 * 60
    screenshot(page, "run-timeline-compact")

    # Jump to the next error: the one in view (unfolded, outlined); the gate and the first
    # error are far back (not on the page), so it is the newest error.
    page.click("#jump-error")
    jumped = page.locator("#timeline .step.jumped")
    expect(jumped).to_have_attribute("data-error", "")
    expect(jumped.locator("details.step-fold")).to_have_attribute("open", "")
    expect(jumped).to_be_in_viewport()
    expect(jumped).to_contain_text("timeout")
    status = page.locator("#jump-status")
    expect(status).to_have_text("")
    # Pressed again: no error further down on the page, so back to the first on it, and
    # the page says so (older steps, which may hold more, are not loaded).
    page.click("#jump-error")
    expect(status).to_contain_text("No error further down: back to the first on this page.")
    expect(status).to_contain_text("Older steps are not loaded")
    expect(page.locator("#timeline .step.jumped")).to_contain_text("timeout")

    # The gate is far back: none on the page, said in words, with the ways to reach it.
    page.click("#jump-gate")
    expect(status).to_contain_text("No gate on this page. Older steps are not loaded")
    expect(page.locator("#jump-gate")).to_have_class("none-found")
    expect(page.locator("#timeline .step.jumped")).to_contain_text("timeout")  # not moved
    page.click("#jump-load-older")
    expect(status).to_have_text("")
    expect(steps).to_have_count(100)  # the 50 before them, loaded above
    page.click("#jump-gate")  # still none: the gate is older than these
    expect(status).to_contain_text("No gate on this page.")
    page.click("#jump-show-all")
    expect(page.locator("#timeline-filtered")).to_be_visible()
    expect(steps).to_have_count(1)
    expect(steps.first).to_contain_text("needle@example.com")
    page.click("#jump-gate")
    expect(page.locator("#timeline .step.jumped")).to_have_attribute("data-kind", "gate")
    expect(status).to_have_text("")  # every gate of the run is on a filtered page
    operator.goto(f"/runs/{run_id}/")

    # Filter by kind: every gate of the run, however far back, and no live socket.
    page.check("#timeline-filter input[name=kind][value=gate]")
    page.click("#timeline-filter button[type=submit]")
    expect(page.locator("#timeline-filtered")).to_be_visible()
    expect(steps).to_have_count(1)
    expect(steps.first).to_have_attribute("data-kind", "gate")
    page.check("#timeline-filter input[name=kind][value=error]")
    page.click("#timeline-filter button[type=submit]")
    expect(steps).to_have_count(2)
    page.click("#jump-error")
    expect(page.locator("#timeline .step.jumped")).to_contain_text("relation does not exist")

    # Search within the run.
    page.check("#timeline-filter input[name=kind][value='']")
    page.fill("#timeline-filter input[name=q]", "needle@example")
    page.click("#timeline-filter button[type=submit]")
    expect(steps).to_have_count(1)
    expect(steps.first).to_contain_text("needle@example.com")

    # Live steps keep the page bounded: past 200 the oldest leave, "Load older" brings
    # them back (steps pushed here as the socket would: appended, then the message event).
    operator.goto(f"/runs/{run_id}/")
    expect(steps).to_have_count(50)
    page.evaluate(
        """() => {
        const timeline = document.getElementById('timeline');
        const model = timeline.querySelector('.step');
        for (let seq = 1000; seq < 1200; seq++) {
            const step = model.cloneNode(true);
            step.id = 'step-' + seq;
            step.dataset.seq = String(seq);
            timeline.append(step);
        }
        document.querySelector('[ws-connect]').dispatchEvent(
            new CustomEvent('htmx:wsAfterMessage', {bubbles: true}));
    }"""
    )
    expect(steps).to_have_count(200)
    first = steps.first.get_attribute("data-seq")
    expect(page.locator("#load-older button")).to_have_text(f"Load older steps (before #{first})")
    assert operator.console_errors == []
