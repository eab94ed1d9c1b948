"""POST /api/hooks/<agent>: signed, fresh, idempotent, validated; refused without a trace."""

import json
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from runs.models import Run
from triggers.models import WebhookDelivery, WebhookSecret, new_secret

from .conftest import AGENT, INPUT, post_hook, v1_signature

pytestmark = pytest.mark.django_db


def assert_nothing_created(response, status: int, *, runs: int = 0) -> None:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["detail"]
    assert Run.objects.count() == runs
    assert WebhookDelivery.objects.count() == runs


# --- launching ---------------------------------------------------------------------------------
def test_a_signed_delivery_launches_a_run(
    hook_client, secret, no_enqueue, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = post_hook(hook_client, {"input": INPUT}, secret=secret.secret, key="order-1")
    assert response.status_code == 201, response.content
    run = Run.objects.get()
    assert run.agent == AGENT
    assert run.trigger == Run.Trigger.WEBHOOK
    assert run.source == "delivery order-1"
    assert run.launched_by is None
    assert run.input == INPUT
    assert run.status == Run.Status.QUEUED
    assert no_enqueue == [str(run.pk)]
    body = response.json()
    delivery = WebhookDelivery.objects.get()
    assert body["id"] == str(run.pk) and body["delivery"] == str(delivery.pk)
    assert body["trigger"] == "webhook" and body["status"] == "queued"
    assert body["url"].endswith(f"/runs/{run.pk}/")
    # A secret holder learns which run it launched, not what runs read or wrote.
    assert "input" not in body and "output" not in body
    assert (delivery.agent, delivery.key, delivery.run, delivery.secret) == (
        AGENT,
        "order-1",
        run,
        secret,
    )


def test_without_a_key_the_source_is_the_delivery_id(
    legacy_signatures, hook_client, secret, no_enqueue
):
    # The deprecated scheme signs no id; without an Idempotency-Key the delivery's own id is
    # the source.
    response = post_hook(hook_client, {"input": INPUT}, secret=secret.secret, legacy=True)
    assert response.status_code == 201
    delivery = WebhookDelivery.objects.get()
    assert delivery.key == ""
    assert Run.objects.get().source == f"delivery {delivery.pk}"
    # Deliveries without a key never collide with each other (a new timestamp: not a replay).
    again = post_hook(
        hook_client,
        {"input": INPUT},
        secret=secret.secret,
        legacy=True,
        timestamp=int(time.time()) + 1,
    )
    assert again.status_code == 201
    assert Run.objects.count() == WebhookDelivery.objects.count() == 2


def test_the_input_is_cleaned_like_the_api_cleans_it(hook_client, secret, no_enqueue):
    response = post_hook(
        hook_client,
        {"input": {"question": "  Revenue?  ", "report_to": "analytics@example.com"}},
        secret=secret.secret,
    )
    assert response.status_code == 201
    assert Run.objects.get().input["question"] == "Revenue?"


# --- refused: signature, timestamp, headers, agent ---------------------------------------------
def test_a_tampered_body_is_refused(hook_client, secret, no_enqueue):
    signed = json.dumps({"input": INPUT}).encode()
    tampered = {"input": {**INPUT, "report_to": "attacker@example.com"}}
    response = post_hook(hook_client, tampered, secret=secret.secret, sign_body=signed)
    assert_nothing_created(response, 401)
    assert "signature does not match" in response.json()["detail"]


def test_a_wrong_secret_is_refused(hook_client, secret, no_enqueue):
    response = post_hook(hook_client, {"input": INPUT}, secret=new_secret())
    assert_nothing_created(response, 401)


def test_another_agents_secret_is_refused(hook_client, secret, no_enqueue):
    other = WebhookSecret.objects.create(agent="refund-desk")
    response = post_hook(hook_client, {"input": INPUT}, secret=other.secret)
    assert_nothing_created(response, 401)


@pytest.mark.parametrize(
    "offset,word", [(-301, "old"), (-3600, "old"), (301, "future"), (86400, "future")]
)
def test_a_timestamp_outside_the_window_is_refused(hook_client, secret, no_enqueue, offset, word):
    # Correctly signed, timestamp included: only its age is wrong.
    stamp = int(time.time()) + offset
    response = post_hook(hook_client, {"input": INPUT}, secret=secret.secret, timestamp=stamp)
    assert_nothing_created(response, 401)
    assert word in response.json()["detail"]


def test_a_timestamp_inside_the_window_is_accepted(hook_client, secret, no_enqueue):
    for offset in (-290, 290):
        stamp = int(time.time()) + offset
        response = post_hook(hook_client, {"input": INPUT}, secret=secret.secret, timestamp=stamp)
        assert response.status_code == 201, response.content


def test_the_window_is_a_setting(hook_client, secret, no_enqueue, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "WEBHOOK_TOLERANCE_SECONDS": 10}
    stamp = int(time.time()) - 60
    response = post_hook(hook_client, {"input": INPUT}, secret=secret.secret, timestamp=stamp)
    assert_nothing_created(response, 401)


@pytest.mark.parametrize(
    "headers,message",
    [
        ({"webhook-signature": ""}, "missing webhook-signature"),
        ({"webhook-id": ""}, "missing webhook-id"),
        ({"webhook-id": "caf\u00e9"}, "printable ASCII"),
        ({"webhook-id": "m" * 129}, "printable ASCII"),
        ({"webhook-timestamp": ""}, "missing webhook-timestamp"),
        ({"webhook-timestamp": "yesterday"}, "unix seconds"),
        ({"webhook-timestamp": "-5"}, "unix seconds"),
        ({"webhook-timestamp": "99999999999999999999"}, "unix seconds"),
        ({"webhook-signature": "v1,not base64!"}, "v1,<base64>"),
        ({"webhook-signature": "v1a,abc"}, "no v1,<base64> signature"),
        ({"webhook-signature": "v1,"}, "signature does not match"),
        ({"webhook-signature": "garbage"}, "no v1,<base64> signature"),
        ({"webhook-signature": " ".join(["v1,AAAA"] * 9)}, "at most 8"),
    ],
)
def test_missing_or_malformed_headers_are_refused(
    hook_client, secret, no_enqueue, headers, message
):
    response = post_hook(hook_client, {"input": INPUT}, secret=secret.secret, headers=headers)
    assert_nothing_created(response, 401)
    assert message in response.json()["detail"]


@pytest.mark.parametrize(
    "headers,message",
    [
        ({"X-Agentops-Signature": ""}, "sha256="),
        ({"X-Agentops-Timestamp": ""}, "missing X-Agentops-Timestamp"),
        ({"X-Agentops-Timestamp": "yesterday"}, "unix seconds"),
        ({"X-Agentops-Signature": "md5=abc"}, "sha256="),
    ],
)
def test_missing_or_malformed_legacy_headers_are_refused(
    legacy_signatures, hook_client, secret, no_enqueue, headers, message
):
    response = post_hook(
        hook_client, {"input": INPUT}, secret=secret.secret, headers=headers, legacy=True
    )
    assert_nothing_created(response, 401)
    assert message in response.json()["detail"]


def test_an_unsigned_request_is_refused(hook_client, secret, no_enqueue):
    assert_nothing_created(post_hook(hook_client, {"input": INPUT}, secret=None), 401)


def test_an_unknown_agent_is_404(hook_client, secret, no_enqueue):
    response = post_hook(hook_client, {"input": INPUT}, secret=secret.secret, agent="no-such")
    assert_nothing_created(response, 404)


def test_an_agent_without_a_secret_takes_no_webhooks(hook_client, no_enqueue):
    response = post_hook(hook_client, {"input": INPUT}, secret=new_secret(), agent="refund-desk")
    assert_nothing_created(response, 403)
    assert "no current secret" in response.json()["detail"]


def test_the_signature_is_checked_before_the_body_is_read(hook_client, secret, no_enqueue):
    # Bad JSON and a bad signature: the sender learns nothing about the body's fate.
    response = post_hook(hook_client, b"{not json", secret=new_secret())
    assert_nothing_created(response, 401)


# --- refused: the body -------------------------------------------------------------------------
@pytest.mark.parametrize("raw", [b"{not json", b"", b'{"input": {"question": NaN}}'])
def test_a_body_that_is_not_json_is_400(hook_client, secret, no_enqueue, raw):
    assert_nothing_created(post_hook(hook_client, raw, secret=secret.secret), 400)


def test_a_body_that_is_not_utf8_is_refused(legacy_signatures, hook_client, secret, no_enqueue):
    # Standard Webhooks signs text: such a body cannot carry a v1 signature.
    raw = b"\xff\xfe\x00"
    response = post_hook(hook_client, raw, secret=secret.secret)
    assert_nothing_created(response, 401)
    assert "not UTF-8" in response.json()["detail"]
    legacy = post_hook(hook_client, raw, secret=secret.secret, legacy=True)
    assert_nothing_created(legacy, 400)


@pytest.mark.parametrize(
    "body,loc",
    [
        ([INPUT], ["body"]),
        (INPUT, ["body", "question"]),  # the bare input, without its envelope
        ({}, ["body", "input"]),
        ({"input": INPUT, "limits": {"max_steps": 500}}, ["body", "limits"]),
        ({"input": [1, 2]}, ["body", "input"]),
        ({"input": {**INPUT, "report_to": "not an e-mail"}}, ["body", "input", "report_to"]),
        ({"input": {**INPUT, "question": 42}}, ["body", "input", "question"]),
        ({"input": {**INPUT, "extra": 1}}, ["body", "input"]),
        ({"input": {"report_to": "a@example.com"}}, ["body", "input", "question"]),
    ],
)
def test_bad_input_is_422_with_field_errors(hook_client, secret, no_enqueue, body, loc):
    response = post_hook(hook_client, body, secret=secret.secret, key="k")
    assert response.status_code == 422, response.content
    errors = response.json()["errors"]
    assert loc in [e["loc"] for e in errors], errors
    assert all(e["msg"] for e in errors)
    assert Run.objects.count() == WebhookDelivery.objects.count() == 0


def test_a_body_too_large_is_413(hook_client, secret, no_enqueue, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "MAX_INPUT_BYTES": 1000}
    body = {"input": {**INPUT, "question": "x" * 20_000}}
    assert_nothing_created(post_hook(hook_client, body, secret=secret.secret), 413)
    # Within the body's slack, but the input itself is over the limit.
    body = {"input": {**INPUT, "question": "x" * 1500}}
    assert_nothing_created(post_hook(hook_client, body, secret=secret.secret), 413)


@pytest.mark.parametrize("key", ["k" * 129, "caf\u00e9", "tab\there"])
def test_a_bad_idempotency_key_is_400(legacy_signatures, hook_client, secret, no_enqueue, key):
    response = post_hook(hook_client, {"input": INPUT}, secret=secret.secret, key=key, legacy=True)
    assert_nothing_created(response, 400)


def test_only_post_is_accepted(hook_client, secret):
    assert hook_client.get(f"/api/hooks/{AGENT}").status_code == 405


# --- idempotency -------------------------------------------------------------------------------
def test_the_same_key_twice_launches_one_run(hook_client, secret, no_enqueue):
    first = post_hook(hook_client, {"input": INPUT}, secret=secret.secret, key="evt_1")
    # A retry, signed again later (its timestamp differs), the same body re-serialised.
    again = post_hook(
        hook_client,
        json.dumps({"input": INPUT}, indent=2).encode(),
        secret=secret.secret,
        key="evt_1",
        timestamp=int(time.time()) + 5,
    )
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    assert first.json()["delivery"] == again.json()["delivery"]
    assert Run.objects.count() == WebhookDelivery.objects.count() == 1


def test_the_same_key_with_another_body_is_409(hook_client, secret, no_enqueue):
    assert (
        post_hook(hook_client, {"input": INPUT}, secret=secret.secret, key="evt_1").status_code
        == 201
    )
    other = {"input": {**INPUT, "question": "Something else?"}}
    response = post_hook(hook_client, other, secret=secret.secret, key="evt_1")
    assert_nothing_created(response, 409, runs=1)
    assert "evt_1" in response.json()["detail"] and "another body" in response.json()["detail"]


def test_keys_are_per_agent(hook_client, secret, no_enqueue):
    refund = WebhookSecret.objects.create(agent="refund-desk")
    refund_input = {"order_id": 42, "amount": "1.00", "reason": "Arrived damaged"}
    assert (
        post_hook(hook_client, {"input": INPUT}, secret=secret.secret, key="k").status_code == 201
    )
    response = post_hook(
        hook_client, {"input": refund_input}, secret=refund.secret, key="k", agent="refund-desk"
    )
    assert response.status_code == 201
    assert Run.objects.count() == 2


def test_a_replay_of_a_key_whose_run_was_deleted_is_409(hook_client, secret, no_enqueue):
    assert (
        post_hook(hook_client, {"input": INPUT}, secret=secret.secret, key="k").status_code == 201
    )
    # What deleting the run leaves (SET_NULL); Postgres refuses to delete a run's timeline.
    WebhookDelivery.objects.update(run=None)
    response = post_hook(hook_client, {"input": INPUT}, secret=secret.secret, key="k")
    assert response.status_code == 409
    assert "no longer exists" in response.json()["detail"]


# --- replays ----------------------------------------------------------------------------------
def test_a_captured_request_replayed_in_the_window_launches_one_run(
    hook_client, secret, no_enqueue
):
    stamp = int(time.time())
    sent = [
        post_hook(hook_client, {"input": INPUT}, secret=secret.secret, key="msg_1", timestamp=stamp)
        for _ in range(3)
    ]
    assert [r.status_code for r in sent] == [201, 200, 200]
    assert len({r.json()["id"] for r in sent}) == 1
    assert Run.objects.count() == WebhookDelivery.objects.count() == 1


def test_an_unsigned_idempotency_key_cannot_make_a_replay_new(hook_client, secret, no_enqueue):
    stamp = int(time.time())
    for fresh in ("a", "a", "b", "c"):
        response = post_hook(
            hook_client,
            {"input": INPUT},
            secret=secret.secret,
            key="msg_1",
            timestamp=stamp,
            headers={"Idempotency-Key": fresh},
        )
        assert response.status_code in (200, 201), response.content
    assert Run.objects.count() == 1
    assert Run.objects.get().source == "delivery msg_1"


def test_a_legacy_request_replayed_with_fresh_keys_launches_one_run(
    legacy_signatures, hook_client, secret, no_enqueue
):
    # The deprecated scheme does not sign the Idempotency-Key; the replayed signature is
    # what gives the copy away.
    stamp = int(time.time())
    statuses = [
        post_hook(
            hook_client,
            {"input": INPUT},
            secret=secret.secret,
            key=key,
            timestamp=stamp,
            legacy=True,
        ).status_code
        for key in ("a", "a", "b", "c")
    ]
    assert statuses == [201, 200, 200, 200]
    delivery = WebhookDelivery.objects.get()
    assert delivery.legacy and delivery.message_id.startswith("legacy_")
    assert Run.objects.count() == 1


def test_a_legacy_retry_resigned_with_its_key_is_the_same_delivery(
    legacy_signatures, hook_client, secret, no_enqueue
):
    first = post_hook(hook_client, {"input": INPUT}, secret=secret.secret, key="a", legacy=True)
    again = post_hook(
        hook_client,
        {"input": INPUT},
        secret=secret.secret,
        key="a",
        legacy=True,
        timestamp=int(time.time()) + 3,
    )
    assert (first.status_code, again.status_code) == (201, 200)
    assert Run.objects.count() == 1


def test_the_legacy_scheme_is_refused_by_default(hook_client, secret, no_enqueue):
    response = post_hook(hook_client, {"input": INPUT}, secret=secret.secret, legacy=True)
    assert_nothing_created(response, 401)
    assert "no longer accepted" in response.json()["detail"]
    assert post_hook(hook_client, {"input": INPUT}, secret=secret.secret).status_code == 201


def test_a_legacy_delivery_is_logged_as_deprecated(
    legacy_signatures, hook_client, secret, no_enqueue, caplog
):
    response = post_hook(hook_client, {"input": INPUT}, secret=secret.secret, legacy=True)
    assert response.status_code == 201
    assert any("deprecated" in r.getMessage() for r in caplog.records)


def test_any_of_several_signatures_may_match(hook_client, secret, no_enqueue):
    # A sender rotating its key signs with both; a later version is skipped, not an error.
    body = json.dumps({"input": INPUT}).encode()
    stamp = str(int(time.time()))
    other = new_secret()
    signatures = " ".join(
        [
            "v2,c29tZXRoaW5nIGVsc2U=",
            v1_signature(other, "msg_9", stamp, body),
            v1_signature(secret.secret, "msg_9", stamp, body),
        ]
    )
    response = hook_client.post(
        f"/api/hooks/{AGENT}",
        data=body,
        content_type="application/json",
        headers={
            "webhook-id": "msg_9",
            "webhook-timestamp": stamp,
            "webhook-signature": signatures,
        },
    )
    assert response.status_code == 201, response.content


def test_the_id_is_signed(hook_client, secret, no_enqueue):
    # A replay under a new webhook-id does not carry a valid signature.
    body = json.dumps({"input": INPUT}).encode()
    stamp = str(int(time.time()))
    signed = v1_signature(secret.secret, "msg_1", stamp, body)
    assert (
        post_hook(hook_client, body, secret=secret.secret, key="msg_1", timestamp=stamp).status_code
        == 201
    )
    response = hook_client.post(
        f"/api/hooks/{AGENT}",
        data=body,
        content_type="application/json",
        headers={"webhook-id": "msg_2", "webhook-timestamp": stamp, "webhook-signature": signed},
    )
    assert_nothing_created(response, 401, runs=1)


# --- rotation ----------------------------------------------------------------------------------
def test_during_a_rotation_both_secrets_are_accepted(hook_client, secret, no_enqueue):
    new = WebhookSecret.rotate(AGENT, grace=timedelta(hours=1))
    secret.refresh_from_db()
    assert secret.expires_at is not None and new.expires_at is None
    assert new.secret != secret.secret
    for used in (secret, new):
        response = post_hook(hook_client, {"input": INPUT}, secret=used.secret)
        assert response.status_code == 201, response.content
    assert list(
        WebhookDelivery.objects.order_by("created_at").values_list("secret", flat=True)
    ) == [
        secret.pk,
        new.pk,
    ]


def test_after_the_rotation_the_old_secret_is_refused(hook_client, secret, no_enqueue):
    new = WebhookSecret.rotate(AGENT, grace=timedelta(hours=1))
    WebhookSecret.objects.filter(pk=secret.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert_nothing_created(post_hook(hook_client, {"input": INPUT}, secret=secret.secret), 401)
    assert post_hook(hook_client, {"input": INPUT}, secret=new.secret).status_code == 201


def test_a_rotation_never_extends_an_earlier_expiry(secret):
    soon = timezone.now() + timedelta(minutes=5)
    WebhookSecret.objects.filter(pk=secret.pk).update(expires_at=soon)
    WebhookSecret.rotate(AGENT, grace=timedelta(hours=24))
    secret.refresh_from_db()
    assert secret.expires_at == soon


def test_a_revoked_secret_is_refused_at_once(hook_client, secret, no_enqueue):
    assert secret.revoke() is True
    assert secret.revoke() is False
    response = post_hook(hook_client, {"input": INPUT}, secret=secret.secret)
    # Its agent has no other secret left.
    assert_nothing_created(response, 403)
    WebhookSecret.objects.create(agent=AGENT)
    assert_nothing_created(post_hook(hook_client, {"input": INPUT}, secret=secret.secret), 401)


def test_the_endpoint_is_in_the_openapi_document(operator, client):
    client.force_login(operator)
    paths = client.get("/api/openapi.json").json()["paths"]
    operation = paths["/api/hooks/{agent}"]["post"]
    assert {p["name"] for p in operation["parameters"]} >= {
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "Idempotency-Key",
    }
    assert operation.get("security") in (None, [])  # no user: the signature authenticates
