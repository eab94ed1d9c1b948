"""Idempotency-Key on the API's state-changing calls (agentops/idempotency.py): a retry with
the same key gets the first answer and does nothing twice; another body under the key is
refused; keys are per principal and expire; malformed keys are 400; failures are not kept."""

import json
from datetime import timedelta

import pytest
from django.core.files.base import ContentFile
from django.db import OperationalError
from django.test import Client
from django.utils import timezone

from agentops import embedded, idempotency, tasks
from agentops.models import IdempotentRequest
from approvals.models import Approval
from runs import engine
from runs.models import Run
from tests.approvals.conftest import gated
from tests.conftest import make_user
from tests.runs.test_api import REFUND, bearer_client, post_json

pytestmark = pytest.mark.django_db

LAUNCH = {"agent": "refund-desk", "input": REFUND}


def launch(client: Client, key: str | None, body=LAUNCH, **extra):
    if key is not None:
        extra["HTTP_IDEMPOTENCY_KEY"] = key
    return post_json(client, "/api/runs", body, **extra)


def test_a_retry_with_the_key_gets_the_first_answer_and_launches_once(
    operator, no_enqueue, django_capture_on_commit_callbacks
):
    client = bearer_client(operator)
    with django_capture_on_commit_callbacks(execute=True):
        first = launch(client, "launch-1")
        retry = launch(client, "launch-1")
    assert first.status_code == retry.status_code == 201, first.content
    assert retry.content == first.content
    assert retry["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first
    assert Run.objects.count() == 1
    assert str(Run.objects.get().pk) == first.json()["id"]
    assert no_enqueue == [first.json()["id"]]


def test_without_a_key_each_launch_is_a_run(operator, no_enqueue):
    client = bearer_client(operator)
    assert launch(client, None).status_code == launch(client, None).status_code == 201
    assert Run.objects.count() == 2
    assert not IdempotentRequest.objects.exists()


def test_the_same_key_with_another_body_is_422_and_launches_nothing(operator, no_enqueue):
    client = bearer_client(operator)
    assert launch(client, "k").status_code == 201
    other = launch(client, "k", {**LAUNCH, "input": {**REFUND, "amount": "2.00"}})
    assert other.status_code == 422
    assert "already used for another request" in other.json()["detail"]
    assert Run.objects.count() == 1
    # Another query string is another request too.
    assert launch(client, "k", LAUNCH, QUERY_STRING="x=1").status_code == 422


def test_the_same_json_spelled_otherwise_is_the_same_request(operator, no_enqueue):
    client = bearer_client(operator)
    first = launch(client, "k")
    respelled = json.dumps({"input": dict(reversed(REFUND.items())), "agent": "refund-desk"})
    retry = launch(client, "k", respelled.replace(",", " ,  "))
    assert retry.status_code == 201 and retry.content == first.content
    assert Run.objects.count() == 1


def test_a_key_is_the_principals_own(operator, django_user_model, no_enqueue):
    other = make_user(django_user_model, "otto", "operator")
    mine = launch(bearer_client(operator), "shared-key")
    theirs = launch(bearer_client(other), "shared-key")
    assert mine.status_code == theirs.status_code == 201
    assert "Idempotent-Replayed" not in theirs
    assert mine.json()["id"] != theirs.json()["id"]
    assert Run.objects.count() == 2


def test_a_session_and_a_token_of_one_user_share_their_keys(operator, no_enqueue):
    session = Client()
    session.force_login(operator)
    first = launch(session, "k")
    retry = launch(bearer_client(operator), "k")
    assert retry.status_code == 201 and retry["Idempotent-Replayed"] == "true"
    assert retry.json()["id"] == first.json()["id"]


def test_the_key_is_scoped_to_the_path(operator, no_enqueue):
    client = bearer_client(operator)
    run = Run.objects.get(pk=launch(client, "k").json()["id"])
    cancel = post_json(client, f"/api/runs/{run.pk}/cancel", {}, HTTP_IDEMPOTENCY_KEY="k")
    assert cancel.status_code == 200 and "Idempotent-Replayed" not in cancel, cancel.content


@pytest.mark.parametrize("key", ["", "x" * 129, "has space", "tab\tkey", "caf\u00e9"], ids=repr)
def test_a_malformed_key_is_400_and_nothing_happens(operator, no_enqueue, key):
    response = launch(bearer_client(operator), key)
    assert response.status_code == 400
    assert "Idempotency-Key must be 1 to 128 printable ASCII" in response.json()["detail"]
    assert not Run.objects.exists()


def test_the_longest_key_is_accepted(operator, no_enqueue):
    assert launch(bearer_client(operator), "k" * 128).status_code == 201


def test_after_the_window_the_key_is_free_again_and_pruned(operator, no_enqueue, settings):
    client = bearer_client(operator)
    first = launch(client, "k")
    launch(client, "fresh")
    IdempotentRequest.objects.filter(key="k").update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    again = launch(client, "k")
    assert again.status_code == 201 and "Idempotent-Replayed" not in again
    assert again.json()["id"] != first.json()["id"]
    assert Run.objects.count() == 3

    settings.AGENTOPS = {**settings.AGENTOPS, "IDEMPOTENCY_WINDOW_SECONDS": 60.0}
    row = IdempotentRequest.objects.get(key="k")
    assert (row.expires_at - row.created_at) == timedelta(seconds=86400)
    launch(client, "short")
    short = IdempotentRequest.objects.get(key="short")
    assert short.expires_at - short.created_at == timedelta(seconds=60)
    assert idempotency.prune(now=timezone.now() + timedelta(seconds=61)) == 1
    assert set(IdempotentRequest.objects.values_list("key", flat=True)) == {"k", "fresh"}
    assert idempotency.prune(now=timezone.now() + timedelta(days=2)) == 2
    assert not IdempotentRequest.objects.exists()


def test_a_failed_attempt_keeps_neither_its_work_nor_the_key(operator, no_enqueue, monkeypatch):
    real = engine.launch
    calls = []

    def launch_then_lose_the_database(**kwargs):
        run = real(**kwargs)
        calls.append(run.pk)
        if len(calls) == 1:
            raise OperationalError("server closed the connection unexpectedly")
        return run

    monkeypatch.setattr(engine, "launch", launch_then_lose_the_database)
    client = bearer_client(operator)
    assert launch(client, "k").status_code == 503
    assert not Run.objects.exists() and not IdempotentRequest.objects.exists()
    retry = launch(client, "k")
    assert retry.status_code == 201 and "Idempotent-Replayed" not in retry
    assert list(Run.objects.values_list("pk", flat=True)) == [calls[1]]


def test_an_answer_refused_by_the_view_is_kept(operator, viewer, no_enqueue):
    """A 4xx the view gave is the request's answer: the retry gets it again, even once the
    cause is gone (a new key asks anew)."""
    client = bearer_client(operator)
    unknown = {"agent": "no-such-agent", "input": {}}
    first = launch(client, "k", unknown)
    assert first.status_code == 422
    retry = launch(client, "k", unknown)
    assert retry.status_code == 422 and retry["Idempotent-Replayed"] == "true"
    assert retry.content == first.content


def test_authentication_failures_are_not_kept(operator, no_enqueue):
    anonymous = launch(Client(), "k")
    assert anonymous.status_code == 401
    assert not IdempotentRequest.objects.exists()
    assert launch(bearer_client(operator), "k").status_code == 201


def test_a_retried_decision_gets_the_first_answer_not_already_decided(
    operator, django_user_model, no_enqueue
):
    approver = make_user(django_user_model, "arthur", "approver")
    _run, approval = gated("test-payer", {"to": "acme", "amount": "800.00"}, by=operator)
    client = bearer_client(approver)
    path = f"/api/approvals/{approval.pk}/decision"
    body = {"decision": "approve"}
    first = post_json(client, path, body, HTTP_IDEMPOTENCY_KEY="decide-1")
    retry = post_json(client, path, body, HTTP_IDEMPOTENCY_KEY="decide-1")
    assert first.status_code == retry.status_code == 200, first.content
    assert retry.content == first.content and retry["Idempotent-Replayed"] == "true"
    approval.refresh_from_db()
    assert approval.status == Approval.Status.APPROVED
    # Without the key the same retry is told the approval was already decided.
    unkeyed = post_json(client, path, body)
    assert unkeyed.status_code == 409 and unkeyed.json()["detail"].startswith("already approved")
    rejection = post_json(
        client, path, {"decision": "reject", "reason": "no"}, HTTP_IDEMPOTENCY_KEY="decide-1"
    )
    assert rejection.status_code == 422


def test_signed_webhooks_keep_their_own_key_rules(operator):
    """POST /api/hooks reads Idempotency-Key itself (per agent, signed deliveries): the API's
    rules do not answer for it."""
    response = Client().post(
        "/api/hooks/refund-desk", "{}", content_type="application/json", HTTP_IDEMPOTENCY_KEY=""
    )
    assert response.status_code != 400 or "printable ASCII" not in response.json()["detail"]
    assert not IdempotentRequest.objects.exists()


def test_the_openapi_document_names_the_header_on_state_changing_calls():
    schema = Client().get("/api/openapi.json").json()

    def names(path: str, method: str) -> list[str]:
        return [p["name"] for p in schema["paths"][path][method].get("parameters", [])]

    for path, method in [
        ("/api/runs", "post"),
        ("/api/runs/{run_id}/cancel", "post"),
        ("/api/approvals/{approval_id}/decision", "post"),
        ("/api/approvals/batch", "post"),
        ("/api/approvals/{approval_id}/grant", "post"),
        ("/api/plans/{plan_id}/decision", "post"),
        ("/api/runs/{run_id}/compensations", "post"),
        ("/api/budgets/{budget_id}", "delete"),
        ("/api/external/sessions", "post"),
    ]:
        assert "Idempotency-Key" in names(path, method), (path, method)
    assert "Idempotency-Key" not in names("/api/runs", "get")
    parameter = next(p for p in schema["paths"]["/api/runs"]["post"]["parameters"])
    assert "first answer" in parameter["description"]
    # Signed webhooks document their own rules, not these.
    hook = schema["paths"]["/api/hooks/{agent}"]["post"].get("parameters", [])
    assert not any("first answer" in p.get("description", "") for p in hook)


def test_beat_and_the_embedded_sweeps_prune_expired_keys(operator, no_enqueue, settings):
    client = bearer_client(operator)
    launch(client, "old")
    launch(client, "new")
    IdempotentRequest.objects.filter(key="old").update(expires_at=timezone.now())
    entry = settings.CELERY_BEAT_SCHEDULE["prune-idempotency-keys"]
    assert entry["task"] == tasks.prune_idempotency_keys.name
    embedded.Sweeps._sweep()
    assert list(IdempotentRequest.objects.values_list("key", flat=True)) == ["new"]
    IdempotentRequest.objects.update(expires_at=timezone.now())
    assert tasks.prune_idempotency_keys() == 1
    assert not IdempotentRequest.objects.exists()


def test_a_form_already_parsed_has_a_fingerprint_too(rf):
    """A multipart body read into request.POST cannot be read again as bytes: its fields and
    files count instead of a 500."""
    one = rf.post("/api/x", {"a": "1", "f": ContentFile(b"xyz", name="f.txt")})
    two = rf.post("/api/x", {"a": "2", "f": ContentFile(b"xyz", name="f.txt")})
    for request in (one, two):
        assert request.POST and request.FILES  # parsed: request.body is gone
    assert idempotency.fingerprint(one) != idempotency.fingerprint(two)
    again = rf.post("/api/x", {"a": "1", "f": ContentFile(b"xyz", name="f.txt")})
    assert again.POST  # parsed first, as a view would
    assert idempotency.fingerprint(again) == idempotency.fingerprint(one)
