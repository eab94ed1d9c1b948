import hashlib
import hmac
import json
import time

import pytest
from django.test import Client

from triggers.models import WebhookSecret

AGENT = "sql-analyst"
INPUT = {"question": "Revenue by category?", "report_to": "analytics@example.com"}


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """The documented scheme, computed here on its own (not with triggers.signing)."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


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
):
    """POST a webhook signed with `secret` (None: unsigned). `sign_body`: sign these bytes
    instead of the body sent (a body tampered with on the way)."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    sent = {"X-Agentops-Timestamp": stamp}
    if secret is not None:
        sent["X-Agentops-Signature"] = signature(
            secret, stamp, raw if sign_body is None else sign_body
        )
    if key is not None:
        sent["Idempotency-Key"] = key
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
