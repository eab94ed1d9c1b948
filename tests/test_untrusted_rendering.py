"""Model and tool text, planted in every field it can reach, is inert on every page and in
every pushed fragment: escaped, and only ever inside an hx-disable container.

Rendering is the test (not a grep for `|safe`): a filter, tag or helper that let markup
through anywhere would show up as a parsed <script>, <img onerror>, htmx attribute or
out-of-band element here.
"""

import pytest
from django.db import transaction
from django.urls import reverse

from accounts import teams
from approvals import stream_messages
from approvals.models import Approval
from runs import rendering
from runs.models import Run, Step
from tests.approvals.test_views import gated_run
from tests.html_checks import assert_payload_inert, elements
from tests.runs.factories import XSS

pytestmark = pytest.mark.django_db


@pytest.fixture
def poisoned(operator, no_enqueue):
    """A run waiting on an approval, with the payload in every model-controlled field."""
    run, approval = gated_run(operator)
    with transaction.atomic():
        locked = Run.locked(run.pk)
        locked.append_step(
            Step.Kind.LLM,
            {
                "model": "m",
                "content": [
                    {"type": "text", "text": XSS},
                    {"type": "tool_use", "id": "t9", "name": XSS, "input": {XSS: XSS}},
                ],
                "usage": {},
            },
        )
        locked.append_step(
            Step.Kind.TOOL,
            {
                "tool_use_id": "t9",
                "tool": XSS,
                "args": {XSS: XSS},
                "is_error": True,
                "attempts": 1,
                "error": XSS,
            },
        )
    Run.objects.filter(pk=run.pk).update(output=XSS, status_detail=XSS)
    Approval.objects.filter(pk=approval.pk).update(
        args={**approval.args, "body": XSS},
        question=XSS,
        options=[XSS, "ok"],
        context_summary=XSS,
        explanation=f"to {XSS} is not on the allow-list",
    )
    # A failed run for the dashboard's recent failures, with a model-quoting detail.
    failed, _ = gated_run(operator)
    Run.objects.filter(pk=failed.pk).update(
        status=Run.Status.FAILED, termination_reason="consecutive_errors", status_detail=XSS
    )
    return Run.objects.get(pk=run.pk), Approval.objects.get(pk=approval.pk)


def assert_no_raw_markup(html: str) -> None:
    for tag, attrs in elements(html):
        assert tag != "script" or set(attrs) == {"src", "defer"}, (tag, attrs)
        assert tag != "img", (tag, attrs)
        assert not any(a.startswith("on") for a in attrs), (tag, attrs)
        assert attrs.get("hx-post") != "/runs/new/", (tag, attrs)


def test_every_page_shows_the_payload_inert(client, admin_user, poisoned):
    run, approval = poisoned
    client.force_login(admin_user)
    pages = [
        reverse("runs:dashboard"),
        reverse("runs:list"),
        reverse("runs:audit"),
        reverse("runs:detail", args=[run.pk]),
        reverse("runs:audit_run", args=[run.pk]),
        reverse("runs:step", args=[run.pk, run.last_seq]),
        reverse("runs:step", args=[run.pk, run.last_seq - 1]),
        reverse("approvals:queue"),
        reverse("approvals:detail", args=[approval.pk]),
        reverse("approvals:stats"),
        reverse("runs:steps", args=[run.pk]) + f"?before={run.last_seq + 1}",
    ]
    shown = 0
    for url in pages:
        response = client.get(url)
        assert response.status_code == 200, url
        html = response.content.decode()
        assert_no_raw_markup(html)
        if "__pwned" in html:
            shown += 1
            assert_payload_inert(html)
    # Every page that shows model text at all: all but the lists and the stats.
    assert shown >= 8


def test_every_pushed_fragment_is_inert(poisoned):
    run, approval = poisoned
    fragments = []
    for step in run.steps.order_by("seq"):
        fragments.append(rendering.render_step_event(step, run)["html"])
    fragments.extend(rendering.render_run_event(run, launched=True)["html"])
    approval_event = stream_messages.render_approval_event(approval.pk, teams.EVERYTHING)["html"]
    fragments.extend([approval_event] if isinstance(approval_event, str) else approval_event)
    joined = "".join(fragments)
    assert "__pwned" in joined
    for html in fragments:
        assert_no_raw_markup(html)
        if "__pwned" in html:
            assert_payload_inert(html)


def test_exports_are_json_not_html(client, viewer, poisoned):
    run, _ = poisoned
    client.force_login(viewer)
    for fmt, kind in (("json", "application/json"), ("jsonl", "application/jsonl")):
        response = client.get(reverse("runs:export", args=[run.pk, fmt]))
        assert response["Content-Type"] == kind
        assert response["Content-Disposition"].startswith("attachment;")
        assert response["X-Content-Type-Options"] == "nosniff"


SPOOF = "\u202eevil\u202c@example.com and a zero\u200bwidth space"
OVERRIDE_MARK = '<span class="invisible-char" title="U+202E RIGHT-TO-LEFT OVERRIDE">'


@pytest.fixture
def spoofed(operator, no_enqueue):
    """A run waiting on an approval, with bidi and zero-width text in model-controlled fields."""
    run, approval = gated_run(operator)
    with transaction.atomic():
        locked = Run.locked(run.pk)
        locked.append_step(
            Step.Kind.LLM, {"model": "m", "content": [{"type": "text", "text": SPOOF}]}
        )
        locked.append_step(
            Step.Kind.TOOL,
            {"tool_use_id": "t9", "tool": "lookup_order", "args": {}, "result": SPOOF},
        )
    Run.objects.filter(pk=run.pk).update(output=SPOOF)
    Approval.objects.filter(pk=approval.pk).update(
        context_summary=SPOOF, explanation=f"to {SPOOF} is not on the allow-list"
    )
    return Run.objects.get(pk=run.pk), Approval.objects.get(pk=approval.pk)


def test_invisible_characters_are_marked_on_approval_run_and_audit_pages(
    client, admin_user, spoofed
):
    run, approval = spoofed
    client.force_login(admin_user)
    for url in (
        reverse("approvals:detail", args=[approval.pk]),
        reverse("runs:detail", args=[run.pk]),
        reverse("runs:audit_run", args=[run.pk]),
        reverse("runs:step", args=[run.pk, run.last_seq]),
    ):
        html = client.get(url).content.decode()
        assert "\u202e" not in html and "\u200b" not in html, url
        assert OVERRIDE_MARK in html, url
        assert "\u27e8U+200B\u27e9" in html, url
    pushed = rendering.render_step_event(run.steps.get(seq=run.last_seq), run)["html"]
    assert OVERRIDE_MARK in pushed and "\u202e" not in pushed
