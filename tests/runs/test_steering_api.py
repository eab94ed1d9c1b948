"""The steering API: pause, resume, instructions and the choice after a failed step; roles,
CSRF for sessions, idempotency, 409 and 422 with nothing changed, the OpenAPI schema."""

import pytest
from django.db import transaction

from runs.models import Instruction, Recovery, Run, Step

from .factories import make_run
from .test_api import bearer_client, client_for, post_json

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(operator, no_enqueue):
    return make_run(operator, status=Run.Status.RUNNING)


def _url(run: Run, action: str) -> str:
    return f"/api/runs/{run.pk}/{action}"


def test_pause_is_for_operators_and_twice_is_once(operator, viewer, approver, run):
    for user in (viewer, approver):
        assert bearer_client(user).post(_url(run, "pause")).status_code == 403
    client = bearer_client(operator)
    first = client.post(_url(run, "pause"))
    second = client.post(_url(run, "pause"))
    assert first.status_code == second.status_code == 200
    assert first.json()["pause"]["requested_by"] == "olivia"
    assert first.json()["pause"]["requested_at"] == second.json()["pause"]["requested_at"]
    assert first.json()["pause"]["paused_at"] is None


def test_a_session_needs_the_csrf_token(operator, run):
    response = client_for(operator, csrf=True).post(_url(run, "pause"))
    assert response.status_code == 403
    run.refresh_from_db()
    assert run.pause_requested_at is None


def test_resume_of_a_run_not_paused_is_409(operator, run):
    response = bearer_client(operator).post(_url(run, "resume"))
    assert response.status_code == 409 and response.json()["detail"] == "the run is not paused"


def test_resume_ends_the_pause(operator, run):
    client = bearer_client(operator)
    client.post(_url(run, "pause"))
    with transaction.atomic():
        locked = Run.locked(run.pk)
        locked.park(
            "paused",
            reason="paused by an operator",
            by="olivia",
            paused_at=locked.pause_requested_at,
        )
    assert client.get(_url(run, "steer")).json()["pause"]["paused_at"] is not None
    response = client.post(_url(run, "resume"))
    assert response.status_code == 200
    assert response.json()["status"] == "queued" and response.json()["pause"] is None


def test_an_instruction_with_a_key_is_added_once(operator, run):
    client = bearer_client(operator)
    body = {"text": "use the EU warehouse", "idempotency_key": "k-1"}
    first = post_json(client, _url(run, "instructions"), body)
    retried = post_json(client, _url(run, "instructions"), body)
    assert first.status_code == 201 and retried.status_code == 200
    assert Instruction.objects.filter(run=run).count() == 1
    listed = retried.json()["instructions"]
    assert [(i["text"], i["by"], i["delivered_seq"]) for i in listed] == [
        ("use the EU warehouse", "olivia", None)
    ]
    # The header works as the key too: as on every API call, the retry gets the first
    # answer again (agentops/idempotency.py).
    header = post_json(client, _url(run, "instructions"), {"text": "h"}, HTTP_IDEMPOTENCY_KEY="h1")
    again = post_json(client, _url(run, "instructions"), {"text": "h"}, HTTP_IDEMPOTENCY_KEY="h1")
    assert header.status_code == again.status_code == 201
    assert again["Idempotent-Replayed"] == "true" and again.content == header.content
    assert Instruction.objects.filter(run=run, key="h1").count() == 1
    assert Instruction.objects.filter(run=run).count() == 2


@pytest.mark.parametrize(
    "body",
    [{"text": ""}, {"text": "x" * 4001}, {"text": "ok", "extra": 1}, {"text": 5}, "not json"],
)
def test_bad_instructions_are_422_and_add_nothing(operator, run, body):
    response = post_json(bearer_client(operator), _url(run, "instructions"), body)
    assert response.status_code in (400, 422)
    assert not Instruction.objects.exists()


def test_whitespace_only_instruction_is_422(operator, run):
    response = post_json(bearer_client(operator), _url(run, "instructions"), {"text": "   "})
    assert response.status_code == 422 and "empty" in response.json()["detail"]


def test_an_instruction_to_a_finished_run_is_409(operator, no_enqueue):
    done = make_run(operator, status=Run.Status.FAILED)
    response = post_json(bearer_client(operator), _url(done, "instructions"), {"text": "go on"})
    assert response.status_code == 409 and "already finished" in response.json()["detail"]


def _held(run: Run) -> Recovery:
    with transaction.atomic():
        locked = Run.locked(run.pk)
        step = locked.append_step(Step.Kind.TOOL, {"tool": "run_query", "held": True})
        recovery = Recovery.objects.create(
            run=locked,
            failed_seq=step.seq,
            tool="run_query",
            tool_use_id="tu",
            args={"sql": "select 1"},
            error="timeout",
        )
        locked.park("waiting for an operator", reason="a step failed")
    return recovery


def test_a_failed_step_is_read_and_chosen_once(operator, approver, run):
    recovery = _held(run)
    client = bearer_client(operator)
    state = client.get(_url(run, "steer")).json()
    assert state["recovery"]["id"] == recovery.pk and state["recovery"]["error"] == "timeout"
    assert (
        post_json(bearer_client(approver), _url(run, "recovery"), {"choice": "skip"}).status_code
        == 403
    )
    bad = post_json(client, _url(run, "recovery"), {"choice": "retry", "arguments": {"sql": 5}})
    assert bad.status_code == 422
    unknown = post_json(client, _url(run, "recovery"), {"choice": "redo"})
    assert unknown.status_code == 422
    done = post_json(client, _url(run, "recovery"), {"choice": "skip", "note": "shipped already"})
    assert done.status_code == 200 and done.json()["recovery"] is None
    recovery.refresh_from_db()
    assert (recovery.choice, recovery.note, recovery.decided_by) == (
        "skip",
        "shipped already",
        operator,
    )
    again = post_json(client, _url(run, "recovery"), {"choice": "retry"})
    assert again.status_code == 409 and "already chosen: skip by olivia" in again.json()["detail"]


def test_the_openapi_schema_lists_the_steering_endpoints(client, viewer):
    client.force_login(viewer)
    schema = client.get("/api/openapi.json").json()
    for action in ("pause", "resume", "instructions", "recovery", "steer"):
        assert f"/api/runs/{{run_id}}/{action}" in schema["paths"]
    assert "idempotency_key" in schema["components"]["schemas"]["InstructionIn"]["properties"]


def test_a_failed_run_is_reopened_through_the_api(operator, viewer, no_enqueue):
    failed = make_run(operator, status=Run.Status.FAILED, termination_reason="llm_error")
    assert (
        post_json(bearer_client(viewer), _url(failed, "reopen"), {"choice": "retry"}).status_code
        == 403
    )
    client = bearer_client(operator)
    state = client.get(_url(failed, "steer")).json()
    assert state["reopening"] == {
        "choices": ["retry", "instruct"],
        "why_not": "",
        "failed_seq": None,
    }
    skip = post_json(client, _url(failed, "reopen"), {"choice": "skip"})
    assert skip.status_code == 422
    done = post_json(client, _url(failed, "reopen"), {"choice": "instruct", "text": "be brief"})
    assert done.status_code == 200 and done.json()["status"] == "queued"
    assert done.json()["instructions"][0]["text"] == "be brief"
    again = post_json(client, _url(failed, "reopen"), {"choice": "retry"})
    assert again.status_code == 409 and "only a failed run" in again.json()["detail"]
