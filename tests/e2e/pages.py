"""What a person does in the UI, step by step, through the DOM hooks of the UI contract."""

import re

from playwright.sync_api import Page, expect

from .conftest import LiveServer, Session, running_servers, screenshot

RUN_URL = re.compile(r"/runs/(?P<id>[0-9a-f-]{36})/$")


def launch_refund(
    session: Session, *, order_id: int, amount: str, reason: str, shot: str = ""
) -> str:
    """Launch the refund desk from the form; returns the run id of the page it lands on."""
    page = session.page
    open_launch_form(session, "refund-desk")
    page.fill("[name=order_id]", str(order_id))
    page.fill("[name=amount]", amount)
    page.fill("[name=reason]", reason)
    if shot:
        screenshot(page, shot)
    page.click("button#launch")
    page.wait_for_url(RUN_URL)
    return RUN_URL.search(page.url)["id"]


def open_launch_form(session: Session, agent: str) -> None:
    page = session.page
    session.goto("/runs/new/")
    # htmx swaps the agent's own form in: wait for that swap to be over before typing, or it
    # would replace what was typed with the form's initial values.
    with page.expect_response(lambda r: "/runs/new/" in r.url and f"agent={agent}" in r.url):
        page.select_option("select[name=agent]", agent)
    expect(page.locator(".htmx-request, .htmx-swapping, .htmx-settling")).to_have_count(0)
    expect(page.locator("#launch-form-fields fieldset")).to_be_visible()


def expect_status(page: Page, status: str) -> None:
    try:
        expect(page.locator("#run-status")).to_have_attribute("data-status", status)
    except AssertionError as exc:
        # Tell a page that missed an update from a run that really is stuck.
        run = RUN_URL.search(page.url)
        if not (run and running_servers):
            raise
        live = running_servers[0]
        shown = page.locator("#timeline .step").evaluate_all(
            "steps => steps.map(s => s.dataset.seq).slice(-3)"
        )
        socket = page.locator("#live-status").get_attribute("data-state", timeout=1000)
        raise AssertionError(
            f"{exc}\n(the database says the run is {live.run_status(run['id'])!r}, its row"
            f" changed {live.seconds_since_update(run['id']):.1f} s ago; it has steps up to"
            f" #{live.step_seqs(run['id'])[-1:]}, the page up to {shown}; live status: {socket})"
        ) from None


def timeline_seqs(page: Page) -> list[int]:
    return [
        int(s)
        for s in page.locator("#timeline .step").evaluate_all(
            "steps => steps.map(s => s.dataset.seq)"
        )
    ]


def expect_timeline_complete(page: Page, live: LiveServer, run_id: str) -> list[int]:
    """The timeline shows every stored step exactly once, in seq order."""
    expected = live.step_seqs(run_id)
    expect(page.locator("#timeline .step")).to_have_count(len(expected))
    seqs = timeline_seqs(page)
    assert seqs == expected == list(range(1, len(expected) + 1)), (seqs, expected)
    return seqs


def open_approval_from_queue(session: Session, approval_id: str, *, shot: str = "") -> None:
    page = session.page
    session.goto("/approvals/")
    row = page.locator(f"tr.approval-row[data-approval-id='{approval_id}']")
    expect(row).to_be_visible()
    if shot:
        screenshot(page, shot)
    row.locator(f"a[href$='/approvals/{approval_id}/']").first.click()
    page.wait_for_url(f"**/approvals/{approval_id}/")


def decide(
    session: Session,
    approval_id: str,
    button: str,
    *,
    reason: str = "",
    args: dict[str, str] | None = None,
    navigate: bool = True,
) -> None:
    """Open the approval screen (unless it is open) and press approve / edit-approve / reject."""
    page = session.page
    if navigate:
        session.goto(f"/approvals/{approval_id}/")
    for name, value in (args or {}).items():
        page.fill(f"[name=arg_{name}]", value)
    if reason:
        page.fill("textarea[name=reason]", reason)
    # The answer to this press, not what an earlier one left on screen (navigate=False).
    with page.expect_response(_decision_post) as answer:
        page.click(f"button#{button}")
    expect(page.locator("#decision-result")).not_to_be_empty()
    if button == "approve" and 'id="confirm-approve"' in answer.value.text():
        # A high-risk or irreversible call: the second press confirms the effect shown.
        with page.expect_response(_decision_post):
            page.click("#confirm-approve")
        expect(page.locator("#confirm-approve")).to_have_count(0)
        expect(page.locator("#decision-result")).not_to_be_empty()


def _decision_post(response) -> bool:
    return response.request.method == "POST" and response.url.endswith("/decide/")
