"""POST /api/hooks/<agent>: a signed webhook launches a run of the agent. The endpoint's
contract (authentication, idempotency, the order of its checks) is DESCRIPTION below, which
the OpenAPI page shows."""

import hashlib
import json
import logging
from datetime import datetime
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import HttpRequest
from django.urls import reverse
from ninja import Field, Router, Schema, Status
from ninja.decorators import decorate_view
from ninja.errors import HttpError, ValidationError

from agentkit import signing
from agentkit.agents import get_agent
from runs import engine
from runs.api import FieldErrors, Message, refuse_large_bodies
from runs.budgets import models as budgets
from runs.models import Run, canonical_json

from .inputs import input_size, max_input_bytes, validate_input
from .models import WebhookDelivery, WebhookSecret

DESCRIPTION = """POST /api/hooks/<agent>: a signed webhook launches a run of the agent.

No user, no session, hence no CSRF token: the request is authenticated by its signature
(Standard Webhooks: webhook-id, webhook-timestamp and the body signed together, see
agentkit/signing.py) with one of the agent's current webhook secrets (the admin's "Webhook
secrets"). The body is `{"input": {...}}`, the input checked exactly as POST /api/runs
checks it. The webhook-id is the delivery's idempotency key: the same id again (a retry, or
a captured request replayed) answers 200 with the run the first request launched (201) and
never launches a second one; the same id with another body is 409.

The deprecated scheme (X-Agentops-Signature, accepted while AGENTOPS_WEBHOOK_LEGACY_SIGNATURES
is true) signs no id: a replayed copy is recognised by its signature, and an optional
Idempotency-Key header (up to 128 printable ASCII characters) makes a re-signed retry safe.

Checked in this order, each refused before anything is written: the body's size (413), the
agent (404), a current secret (403), id, timestamp and signature (401), the key and the JSON
(400), the input (413, 422). A launched run has trigger "webhook", source
"delivery <webhook-id, Idempotency-Key or delivery id>" and no launcher: a webhook is no
person, and its delivery (admin: Webhook deliveries) records the secret that signed it.
"""

router = Router(tags=["webhooks"])
log = logging.getLogger("agentops.triggers")

IDEMPOTENCY_HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 128


class WebhookIn(Schema):
    """The body (documentation only: the raw body is parsed once its signature is checked)."""

    input: dict[str, Any] = Field(description="The agent's input, as for POST /api/runs.")


class WebhookRunOut(Schema):
    """What a sender learns: the run it launched, not its input or output (a webhook secret
    is not an account that may read runs)."""

    id: UUID
    agent: str
    status: Run.Status
    trigger: Run.Trigger
    source: str
    delivery: UUID = Field(description="This delivery's id (the admin's webhook deliveries).")
    url: str = Field(description="The run's page, for people with an account.")
    created_at: datetime


@router.post(
    "/hooks/{agent}",
    auth=None,
    response={
        200: WebhookRunOut,
        201: WebhookRunOut,
        400: Message,
        401: Message,
        403: Message,
        404: Message,
        409: Message,
        413: Message,
        422: FieldErrors,
    },
    summary="Launch a run from a signed webhook",
    description=DESCRIPTION,
    openapi_extra={
        "requestBody": {"content": {"application/json": {"schema": WebhookIn.model_json_schema()}}},
        "parameters": [
            {"name": name, "in": "header", "required": required, "schema": {"type": "string"}}
            for name, required in (
                (signing.ID_HEADER, True),
                (signing.TIMESTAMP_HEADER, True),
                (signing.SIGNATURE_HEADER, True),
                (IDEMPOTENCY_HEADER, False),
            )
        ],
    },
)
@decorate_view(refuse_large_bodies)
def receive(request: HttpRequest, agent: str) -> Status:
    found = get_agent(agent)
    if found is None:
        raise HttpError(404, f"unknown agent {agent!r}")
    secrets = list(WebhookSecret.objects.usable().filter(agent=agent).values_list("pk", "secret"))
    if not secrets:
        raise HttpError(403, f"agent {agent!r} takes no webhooks: it has no current secret")
    body = request.body
    try:
        verified = signing.verify(secrets, request.headers, body)
    except signing.SignatureError as exc:
        raise HttpError(401, str(exc)) from None
    if verified.legacy:
        log.warning(
            "agent %s: webhook signed with the deprecated %s scheme (secret %s); "
            "move the sender to Standard Webhooks",
            agent,
            signing.LEGACY_SIGNATURE_HEADER,
            verified.key,
        )
        key = _idempotency_key(request)
    else:
        # Signed with the body: the one key a replay cannot change.
        key = verified.message_id
    message_id = verified.message_id
    envelope = _parse(body)
    data = _input_of(envelope)
    if input_size(data) > max_input_bytes():
        raise HttpError(413, f"input is {input_size(data)} bytes; the limit is {max_input_bytes()}")
    body_sha256 = hashlib.sha256(canonical_json(envelope).encode()).hexdigest()
    earlier = _earlier(agent, message_id, key)
    if earlier is not None:
        return _again(earlier, body_sha256)
    cleaned, errors = validate_input(found, data)
    if errors:
        raise _field_errors(errors)
    refusal = budgets.launch_refusal(agent)
    if refusal:
        # Nothing recorded: the sender's retry after the period (or a raised budget) launches.
        raise HttpError(409, refusal)

    with transaction.atomic():
        delivery = WebhookDelivery(
            agent=agent,
            key=key,
            message_id=message_id,
            legacy=verified.legacy,
            body_sha256=body_sha256,
            secret_id=verified.key,
        )
        try:
            # A savepoint: the unique (agent, message_id) and (agent, key) constraints are
            # what stop two requests racing past the check above; the loser reads the
            # winner's.
            with transaction.atomic():
                delivery.save(force_insert=True)
        except IntegrityError:
            return _again(_earlier(agent, message_id, key), body_sha256)
        run = engine.launch(
            agent=found,
            input=cleaned,
            trigger=Run.Trigger.WEBHOOK,
            launched_by=None,
            source=delivery.source,
        )
        delivery.run = run
        delivery.save(update_fields=["run"])
    return Status(201, _out(run, delivery))


def _earlier(agent: str, message_id: str, key: str) -> WebhookDelivery | None:
    """The delivery this request repeats: the same signed id first, else the same key."""
    earlier = WebhookDelivery.objects.filter(agent=agent, message_id=message_id).first()
    if earlier is None and key:
        earlier = WebhookDelivery.objects.filter(agent=agent, key=key).first()
    return earlier


def _idempotency_key(request: HttpRequest) -> str:
    key = request.headers.get(IDEMPOTENCY_HEADER, "").strip()
    # It becomes part of the run's source, shown on pages and stored as text.
    if len(key) > MAX_KEY_LENGTH or not (key.isascii() and key.isprintable()):
        raise HttpError(
            400, f"{IDEMPOTENCY_HEADER} must be at most {MAX_KEY_LENGTH} printable ASCII characters"
        )
    return key


def _parse(body: bytes) -> Any:
    try:
        # NaN and Infinity are not JSON, and PostgreSQL's jsonb refuses them.
        return json.loads(body, parse_constant=_not_json)
    except (ValueError, RecursionError) as exc:
        raise HttpError(400, f"the body is not valid JSON: {exc}") from None


def _not_json(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _input_of(envelope: Any) -> Any:
    if not isinstance(envelope, dict):
        raise ValidationError(
            [{"type": "dict_type", "loc": ["body"], "msg": 'must be an object: {"input": {...}}'}]
        )
    problems = [
        {"type": "extra_forbidden", "loc": ["body", name], "msg": "Extra inputs are not permitted"}
        for name in envelope
        if name != "input"
    ]
    if "input" not in envelope:
        problems.append({"type": "missing", "loc": ["body", "input"], "msg": "Field required"})
    if problems:
        raise ValidationError(problems)
    return envelope["input"]


def _field_errors(errors: dict[str, list[str]]) -> ValidationError:
    """The agent's field errors, in the shape ninja gives its own (as POST /api/runs does)."""
    return ValidationError(
        [
            {
                "type": "value_error",
                "loc": ["body", "input"] if field == "__all__" else ["body", "input", field],
                "msg": message,
            }
            for field, messages in errors.items()
            for message in messages
        ]
    )


def _again(delivery: WebhookDelivery, body_sha256: str) -> Status:
    """The answer to a key already used: the same run, unless the body differs."""
    if delivery.body_sha256 != body_sha256:
        raise HttpError(
            409,
            f"{IDEMPOTENCY_HEADER} {delivery.key!r} was already used with another body "
            f"(delivery {delivery.pk}); send a new key for a new request",
        )
    run = Run.objects.filter(pk=delivery.run_id).first() if delivery.run_id else None
    if run is None:
        raise HttpError(409, f"the run of delivery {delivery.pk} no longer exists")
    return Status(200, _out(run, delivery))


def _out(run: Run, delivery: WebhookDelivery) -> dict:
    public = str(settings.AGENTOPS["PUBLIC_URL"]).rstrip("/")
    return {
        "id": run.pk,
        "agent": run.agent,
        "status": run.status,
        "trigger": run.trigger,
        "source": run.source,
        "delivery": delivery.pk,
        "url": public + reverse("runs:detail", args=[run.pk]),
        "created_at": run.created_at,
    }
