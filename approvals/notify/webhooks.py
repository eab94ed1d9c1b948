"""Signed JSON webhooks: one POST per URL of AGENTOPS_WEBHOOK_URLS for each new approval.
Why and how: docs/design/modules.md."""

import hashlib
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from agentkit import signing, tracing

from ..models import Approval
from .delivery import DeliveryError, DeliveryRefused
from .message import payload, slack_payload
from .reminders import describe

# Sent beside the Standard Webhooks headers while the legacy scheme is on (deprecated).
DELIVERY_HEADER = "X-Agentops-Delivery"
SLACK_PREFIX = "slack+"
REMINDER_EVENT = "approval.reminder"


def _cfg(name: str) -> Any:
    return settings.AGENTOPS[name]


def signing_keys() -> list[str]:
    """AGENTOPS_WEBHOOK_SECRET: one key, or several while rotating (every one signs)."""
    keys = _cfg("WEBHOOK_SECRET")
    if isinstance(keys, str):
        keys = keys.split(",")
    return [key.strip() for key in keys if key.strip()]


def target(url: str) -> tuple[str, bool]:
    """(URL to POST to, whether it takes a Slack payload)."""
    if url.startswith(SLACK_PREFIX):
        return url[len(SLACK_PREFIX) :], True
    return url, urlsplit(url).hostname == "hooks.slack.com"


def delivery_id(approval_id, url: str, reminder: str = "") -> str:
    suffix = f"|{reminder}" if reminder else ""
    return hashlib.sha256(f"{approval_id}|{url}{suffix}".encode()).hexdigest()[:32]


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    # A redirected POST would be replayed as a GET elsewhere; treat 3xx as a refusal.
    def redirect_request(self, *args, **kwargs):
        return None


_opener = urllib.request.build_opener(_NoRedirects)


def deliver_webhook(approval_id: str, url: str, reminder: str = "") -> int:
    """POST the signed payload; returns the HTTP status. DeliveryError means retry later,
    DeliveryRefused means retrying cannot help. With `reminder` (its key), the payload is an
    "approval.reminder" event (approvals/notify/reminders.py), with its own delivery id; it is
    not sent once the approval is decided."""
    approval = Approval.objects.select_related("run", "run__launched_by").get(pk=approval_id)
    if reminder and approval.status != Approval.Status.PENDING:
        return 0

    def content(slack: bool) -> dict:
        if slack:
            text = slack_payload(approval)
            if reminder:
                text["text"] = f"Reminder: {describe(approval, reminder)} {text['text']}"
            return text
        data = payload(approval)
        if reminder:
            data["event"] = REMINDER_EVENT
            data["reminder"] = {"key": reminder, "text": describe(approval, reminder)}
        return data

    return post_signed(
        url,
        delivery_id(approval.pk, url, reminder),
        content,
        traceparent=approval.run.traceparent,
        attributes={"agentops.approval.id": str(approval.pk)},
    )


def post_signed(
    url: str,
    message_id: str,
    content: Callable[[bool], dict],
    *,
    traceparent: str | None = None,
    attributes: dict[str, str] | None = None,
) -> int:
    """The one webhook POST of the wing (approvals, reminders, budget crossings): `content(slack)`
    is the JSON to send (a Slack URL's when `slack`), signed as delivery `message_id` with
    every key of AGENTOPS_WEBHOOK_SECRET; returns the HTTP status. DeliveryError means retry
    later, DeliveryRefused means retrying cannot help. With a run's `traceparent` (even an
    untraced run's ""), the POST is a span of the run's trace (with `attributes`), whose W3C
    traceparent the receiver gets to join it."""
    post_to, slack = target(url)
    if urlsplit(post_to).scheme not in ("http", "https"):
        raise DeliveryRefused(f"webhook URL must be http(s): {post_to!r}")
    keys = signing_keys()
    if not keys and not slack:
        raise DeliveryRefused("AGENTOPS_WEBHOOK_SECRET is not set; generic webhooks are not sent")
    body = json.dumps(content(slack), ensure_ascii=False).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "agentops-webhook/1"}
    if keys:
        headers.update(signing.sign(keys, message_id, body))
        if signing.legacy_accepted():
            headers[DELIVERY_HEADER] = message_id
    else:  # a Slack URL without a key: still one id for every retry
        headers[signing.ID_HEADER] = message_id
    if traceparent is None:
        return _post(post_to, body, headers)
    span = {**(attributes or {}), "url.full": post_to}
    with tracing.in_run("agentops.webhook", traceparent, span):
        tracing.inject(headers)
        return _post(post_to, body, headers)


def _post(post_to: str, body: bytes, headers: dict) -> int:
    request = urllib.request.Request(post_to, data=body, headers=headers, method="POST")  # noqa: S310 (scheme checked by the caller)
    try:
        with _opener.open(request, timeout=_cfg("WEBHOOK_TIMEOUT_SECONDS")) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        if exc.code >= 500 or exc.code in (408, 429):
            raise DeliveryError(f"webhook {post_to} answered {exc.code}") from None
        raise DeliveryRefused(f"webhook {post_to} answered {exc.code}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise DeliveryError(f"webhook {post_to} unreachable: {exc}") from None
