import hashlib
import hmac
import json
import time
import uuid
from datetime import UTC, datetime

import pytest
from django.test import Client
from standardwebhooks.webhooks import Webhook

from triggers.models import WebhookSecret

AGENT = "sql-analyst"
INPUT = {"question": "Revenue by category?", "report_to": "analytics@example.com"}


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """The deprecated scheme, computed here on its own (not with agentkit.signing)."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def v1_signature(secret: str, message_id: str, timestamp: str, body: bytes) -> str:
    """Standard Webhooks, as its reference library signs (the sender's side)."""
    moment = datetime.fromtimestamp(int(timestamp), tz=UTC)
    return Webhook(secret).sign(message_id, moment, body.decode("utf-8", "replace"))


def post_hook(
    client: Client,
    body,
    *,
    secret: str | None,
    agent: str = AGENT,
    timestamp: str | int | None = None,
    key: str | None = None,
    sign_body: bytes | None = None,
    headers: dict | None = None,
    legacy: bool = False,
):
    """POST a webhook signed with `secret` (None: unsigned), by Standard Webhooks with `key`
    as its webhook-id (a fresh one if None), or the deprecated way (`legacy`, `key` as the
    Idempotency-Key). `sign_body`: sign these bytes instead of the body sent (a body tampered
    with on the way)."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    signed = raw if sign_body is None else sign_body
    if legacy:
        sent = {"X-Agentops-Timestamp": stamp}
        if secret is not None:
            sent["X-Agentops-Signature"] = signature(secret, stamp, signed)
        if key is not None:
            sent["Idempotency-Key"] = key
    else:
        message_id = key if key is not None else f"msg_{uuid.uuid4().hex}"
        sent = {"webhook-id": message_id, "webhook-timestamp": stamp}
        if secret is not None:
            sent["webhook-signature"] = v1_signature(secret, message_id, stamp, signed)
    sent.update(headers or {})
    return client.post(
        f"/api/hooks/{agent}", data=raw, content_type="application/json", headers=sent
    )


@pytest.fixture
def hook_client() -> Client:
    # As a sender: no session, and CSRF enforced (a signed request needs no token).
    return Client(enforce_csrf_checks=True)


@pytest.fixture
def secret(db) -> WebhookSecret:
    return WebhookSecret.objects.create(agent=AGENT, name="billing")
