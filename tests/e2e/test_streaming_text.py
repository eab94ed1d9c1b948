"""The model's text streams into the live trace (Agent.stream_text): it appears word by word
before the model's step exists, the step replaces it, and a reload mid-answer shows the text
so far or the step, never both."""

import pytest
from playwright.sync_api import expect

from .pages import RUN_URL, expect_status, expect_timeline_complete, open_launch_form

pytestmark = pytest.mark.e2e

# Installed before the page's own scripts, on every document of the context: a mutation
# observer's callback runs before the browser paints, so a state it never sees is never shown.
WATCH = """
window.__drafts = { both: [], lengths: [] };
new MutationObserver(function () {
  var d = document.querySelector("#draft[data-draft-seq]");
  if (!d) return;
  var seq = d.getAttribute("data-draft-seq");
  if (document.getElementById("step-" + seq)) window.__drafts.both.push(seq);
  window.__drafts.lengths.push(d.querySelector("pre").textContent.length);
}).observe(document, { childList: true, subtree: true, characterData: true });
"""

DRAFT = "#draft[data-draft-seq]"


def launch_briefing(session) -> str:
    page = session.page
    open_launch_form(session, "order-briefing")
    page.fill("[name=order_id]", "7")
    page.fill("[name=audience]", "<b>night shift</b>")
    page.click("button#launch")
    page.wait_for_url(RUN_URL)
    return RUN_URL.search(page.url)["id"]


def briefing_draft(page, min_chars: int) -> tuple[int, int]:
    """(seq, characters shown) once the briefing's draft shows at least min_chars."""
    draft = page.locator(DRAFT, has_text="Briefing on order 7")
    expect(draft).to_be_visible()
    page.wait_for_function(
        "n => (document.querySelector('#draft pre') || {textContent: ''}).textContent.length >= n",
        arg=min_chars,
    )
    seq = int(draft.get_attribute("data-draft-seq"))
    return seq, len(draft.locator("pre").text_content())


def test_text_appears_as_it_is_written_then_the_step_replaces_it(server, login):
    operator = login("operator")
    operator.context.add_init_script(WATCH)
    page = operator.page
    run_id = launch_briefing(operator)
    operator.mark_document()

    seq, shown = briefing_draft(page, 40)
    # Written so far, and its step not stored yet: this is the stream, not the answer.
    assert seq not in server.step_seqs(run_id)
    draft = page.locator(DRAFT)
    expect(draft).to_contain_text("The model is writing")
    # The audience is the operator's input quoted by the model: shown as text.
    expect(draft.locator("pre")).to_contain_text("<b>night shift</b>")
    expect(draft.locator("pre b")).to_have_count(0)
    page.wait_for_function(
        "n => document.querySelector('#draft pre') && "
        "document.querySelector('#draft pre').textContent.length > n",
        arg=shown + 40,
    )

    expect_status(page, "succeeded")
    # The step holds the whole briefing; the draft is gone.
    step = page.locator(f"#step-{seq}")
    expect(step).to_contain_text("Briefing on order 7 for <b>night shift</b>")
    expect(page.locator(DRAFT)).to_have_count(0)
    expect_timeline_complete(page, server, run_id)
    drafts = page.evaluate("window.__drafts")
    assert drafts["both"] == []
    # Progressively: many sizes seen, each no shorter than the one before (per model call).
    assert len(set(drafts["lengths"])) > 5
    operator.assert_same_document()
    assert not operator.console_errors


def test_a_reload_mid_answer_shows_the_text_so_far_or_the_step_never_both(server, login):
    operator = login("operator")
    operator.context.add_init_script(WATCH)
    page = operator.page
    run_id = launch_briefing(operator)
    seq, shown = briefing_draft(page, 60)

    page.reload()
    # The new page's socket is given the text so far (the page itself has only the steps).
    draft = page.locator(DRAFT)
    step = page.locator(f"#step-{seq}")
    expect(draft.or_(step)).to_be_visible()
    if draft.count():
        assert len(draft.locator("pre").text_content()) >= shown
    expect_status(page, "succeeded")
    expect(step).to_contain_text("Briefing on order 7")
    expect(page.locator(DRAFT)).to_have_count(0)
    expect_timeline_complete(page, server, run_id)
    assert page.evaluate("window.__drafts")["both"] == []
    assert not operator.console_errors
