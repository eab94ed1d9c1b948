"""The run page's steering section: pause, resume, instructions and the choice after a failed
step, role-checked, CSRF-protected, idempotent, refusals as 4xx fragments, text escaped."""

import pytest
from django.db import transaction
from django.test import Client
from django.urls import reverse

from runs import rendering
from runs.models import Instruction, Recovery, Run, Step
from tests.html_checks import assert_payload_inert

from .factories import XSS, make_run

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "run-steer"}


@pytest.fixture
def run(operator, no_enqueue):
    return make_run(operator, status=Run.Status.RUNNING)


def _held(run: Run, *, error: str = "warehouse unreachable") -> Recovery:
    """The run parked with a failed call waiting for a choice, as the engine leaves it."""
    with transaction.atomic():
        locked = Run.locked(run.pk)
        step = locked.append_step(
            Step.Kind.TOOL,
            {"tool": "run_query", "args": {"sql": "select 1"}, "is_error": True, "held": True},
        )
        recovery = Recovery.objects.create(
            run=locked,
            failed_seq=step.seq,
            tool="run_query",
            tool_use_id="tu_1",
            args={"sql": "select 1"},
            error=error,
        )
        locked.park("waiting for an operator: run_query failed", reason="a step failed")
    run.refresh_from_db()
    return recovery


@pytest.mark.parametrize("name", ["runs:pause", "runs:resume", "runs:instruct", "runs:recover"])
def test_a_viewer_or_an_approver_may_not_steer(client, viewer, approver, run, name):
    for user in (viewer, approver):
        client.force_login(user)
        assert (
            client.post(reverse(name, args=[run.pk]), {"text": "x", "key": "k"}).status_code == 403
        )
    assert not Instruction.objects.exists()
    run.refresh_from_db()
    assert run.pause_requested_at is None


def test_steering_needs_a_login(client, run):
    response = client.post(reverse("runs:pause", args=[run.pk]))
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_steering_needs_the_csrf_token(operator, run):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    assert client.post(reverse("runs:pause", args=[run.pk])).status_code == 403
    run.refresh_from_db()
    assert run.pause_requested_at is None


def test_the_run_page_offers_pause_and_an_instruction_to_operators_only(
    client, operator, viewer, run
):
    client.force_login(operator)
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert 'id="pause-run"' in page and 'id="instruction-form"' in page
    client.force_login(viewer)
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert 'id="run-steer"' in page and 'id="pause-run"' not in page


def test_a_double_click_on_pause_asks_once(client, operator, run):
    client.force_login(operator)
    url = reverse("runs:pause", args=[run.pk])
    first = client.post(url, **HTMX)
    second = client.post(url, **HTMX)
    assert first.status_code == second.status_code == 200
    assert "Pause asked" in first.content.decode()
    assert "asked already" in second.content.decode()
    assert 'id="pause-asked"' in second.content.decode()
    run.refresh_from_db()
    assert run.pause_requested_by == operator


def test_a_paused_run_says_who_paused_it_and_offers_resume(client, operator, run):
    client.force_login(operator)
    client.post(reverse("runs:pause", args=[run.pk]))
    with transaction.atomic():
        locked = Run.locked(run.pk)
        locked.park(
            "paused by olivia",
            reason="paused by an operator",
            by="olivia",
            paused_at=locked.pause_requested_at,
        )
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert "Paused by olivia at " in page and 'id="resume-run"' in page
    assert 'id="cancel-run"' in page  # cancel still works on a paused run
    response = client.post(reverse("runs:resume", args=[run.pk]), **HTMX)
    assert response.status_code == 200 and "Resumed." in response.content.decode()
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED and not run.is_paused
    again = client.post(reverse("runs:resume", args=[run.pk]), **HTMX)
    assert again.status_code == 409 and "not paused" in again.content.decode()


def test_a_finished_run_cannot_be_paused(client, operator, no_enqueue):
    done = make_run(operator, status=Run.Status.SUCCEEDED)
    client.force_login(operator)
    response = client.post(reverse("runs:pause", args=[done.pk]), **HTMX)
    assert response.status_code == 409 and "already finished" in response.content.decode()


def test_an_instruction_sent_twice_with_its_key_is_added_once(client, operator, run):
    client.force_login(operator)
    url = reverse("runs:instruct", args=[run.pk])
    for _ in range(2):
        response = client.post(url, {"text": "use the EU warehouse", "key": "abc"}, **HTMX)
        assert response.status_code == 200
    assert "Sent already." in response.content.decode()
    assert Instruction.objects.filter(run=run).count() == 1
    assert "waits for the next model turn" in response.content.decode()


def test_an_empty_instruction_is_a_form_error(client, operator, run):
    client.force_login(operator)
    response = client.post(
        reverse("runs:instruct", args=[run.pk]), {"text": " ", "key": "k"}, **HTMX
    )
    assert response.status_code == 422 and 'id="steer-error"' in response.content.decode()
    assert not Instruction.objects.exists()


def test_instruction_text_is_shown_escaped(client, operator, run):
    client.force_login(operator)
    response = client.post(
        reverse("runs:instruct", args=[run.pk]), {"text": XSS, "key": "x"}, **HTMX
    )
    assert_payload_inert(response.content.decode(), XSS)


def test_a_failed_step_offers_retry_skip_and_instruct(client, operator, run):
    recovery = _held(run, error=XSS)
    client.force_login(operator)
    page = client.get(reverse("runs:steer", args=[run.pk])).content.decode()
    assert 'id="recovery-retry"' in page and 'id="recovery-skip"' in page
    assert_payload_inert(page, XSS)
    url = reverse("runs:recover", args=[run.pk])
    bad = client.post(url, {"choice": "retry", "arguments": "{not json"}, **HTMX)
    assert bad.status_code == 422
    not_object = client.post(url, {"choice": "retry", "arguments": "[1]"}, **HTMX)
    assert not_object.status_code == 422
    response = client.post(url, {"choice": "retry", "arguments": '{"sql": "select 2"}'}, **HTMX)
    assert response.status_code == 200
    recovery.refresh_from_db()
    assert recovery.choice == "retry" and recovery.edited_args == {"sql": "select 2"}
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED
    choice = run.steps.get(kind=Step.Kind.OPERATOR)
    assert choice.data["by"] == "olivia" and choice.data["edited_args"] == {"sql": "select 2"}
    again = client.post(url, {"choice": "skip"}, **HTMX)
    assert again.status_code == 409 and "already chosen: retry by olivia" in again.content.decode()


def test_instruct_without_text_is_a_form_error(client, operator, run):
    recovery = _held(run)
    client.force_login(operator)
    response = client.post(reverse("runs:recover", args=[run.pk]), {"choice": "instruct"}, **HTMX)
    assert response.status_code == 422
    recovery.refresh_from_db()
    assert recovery.status == Recovery.Status.OPEN


def test_a_pushed_status_step_makes_each_viewer_fetch_the_steering_section(run):
    with transaction.atomic():
        locked = Run.locked(run.pk)
        locked.park("paused by olivia", reason="paused by an operator", by="olivia")
    step = run.steps.order_by("-seq").first()
    html = rendering.render_step_event(step)["html"]
    assert f'hx-get="{reverse("runs:steer", args=[run.pk])}"' in html
    assert 'id="run-steer" hx-swap-oob="true"' in html


def test_a_failed_run_offers_resume_from_here_or_says_why_not(client, operator, no_enqueue):
    client.force_login(operator)
    limit = make_run(operator, status=Run.Status.FAILED, termination_reason="max_steps")
    page = client.get(reverse("runs:detail", args=[limit.pk])).content.decode()
    assert 'id="reopen-why-not"' in page and "fork it from a checkpoint" in page
    assert (
        client.post(
            reverse("runs:reopen", args=[limit.pk]), {"choice": "retry"}, **HTMX
        ).status_code
        == 409
    )

    failed = make_run(operator, status=Run.Status.FAILED, termination_reason="llm_error")
    page = client.get(reverse("runs:detail", args=[failed.pk])).content.decode()
    assert 'id="reopen-retry"' in page and 'id="reopen-instruct"' in page
    response = client.post(reverse("runs:reopen", args=[failed.pk]), {"choice": "retry"}, **HTMX)
    assert response.status_code == 200 and "Reopened (retry)" in response.content.decode()
    failed.refresh_from_db()
    assert failed.status == Run.Status.QUEUED
    assert failed.steps.order_by("-seq").first().data["event"] == "reopened"
    page = client.get(reverse("runs:detail", args=[failed.pk])).content.decode()
    assert "reopened: failed → queued" in page and "model call failed" in page


def test_a_reopened_run_offers_each_viewer_the_controls_they_may_use(
    client, operator, viewer, no_enqueue
):
    failed = make_run(operator, status=Run.Status.FAILED, termination_reason="llm_error")
    client.force_login(operator)
    client.post(reverse("runs:reopen", args=[failed.pk]), {"choice": "retry"}, **HTMX)
    # The push that ended the run took Cancel away; the reopened step's asks for it again,
    # fetched by each viewer (the push is the same bytes for all).
    reopened = failed.steps.order_by("-seq").first()
    html = rendering.render_step_event(reopened)["html"]
    url = reverse("runs:actions", args=[failed.pk])
    assert f'id="run-actions" class="actions" hx-swap-oob="true" hx-get="{url}"' in html
    assert 'id="cancel-run"' in client.get(url).content.decode()
    client.force_login(viewer)
    fetched = client.get(url).content.decode()
    assert 'id="run-actions"' in fetched and 'id="cancel-run"' not in fetched
    # Other steps of a running run leave the controls as they are.
    other = rendering.render_step_event(failed.steps.order_by("seq").first())["html"]
    assert url not in other
