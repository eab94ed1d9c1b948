"""Tell approvers that an approval is waiting: an e-mail and signed JSON webhooks.

gates._open -> (after commit) tasks.approval_requested(id) -> Celery task
notify_approval_requested -> one task per channel (the e-mail, each webhook URL), each
retried with exponential backoff on its own, so a dead endpoint neither repeats the e-mail
nor delays the other URLs. Nothing here blocks or fails a run: enqueueing errors are logged
and swallowed, delivery happens in workers, and the run never waits for it.

Settings (settings.AGENTOPS, from the environment):
- NOTIFY_EMAIL (AGENTOPS_NOTIFY_EMAIL, default on): e-mail the approvers through Django's
  e-mail backend, one message each with that approver's own one-tap decision link
  (approvals/one_tap.py). Approvers are the agent's named approvers (GateRules.approvers) and
  their active delegates if it names any, otherwise every active user with the approver or
  admin role (or superuser), in both cases only those with an e-mail address. Escalation
  tiers get the same e-mail when their time comes (approvals/escalation.py).
- WEBHOOK_URLS (AGENTOPS_WEBHOOK_URLS, comma-separated): each gets a POST. A URL whose host is
  hooks.slack.com, or written with a "slack+" prefix ("slack+https://chat.example/hook", the
  prefix is dropped before sending), gets a Slack-compatible {"text", "blocks"} payload;
  every other URL gets the JSON payload built by `payload()`.
- WEBHOOK_SECRET (AGENTOPS_WEBHOOK_SECRET): the signing key, or several comma-separated while
  rotating (each signs). Without it, generic webhooks are not sent (an unsigned approval feed
  would let anyone forge one); Slack URLs, whose secret is the URL itself, still are.
- PUBLIC_URL (AGENTOPS_PUBLIC_URL): where links in messages point.

Signature (every webhook, Slack ones included): Standard Webhooks, by agentkit/signing.py,
the module every signed request of agentops goes through:
    webhook-id: <id, the same on every retry of one delivery>
    webhook-timestamp: <unix seconds when this attempt was sent>
    webhook-signature: v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>.<raw body bytes>")> …
A receiver checks it with any Standard Webhooks library (`Webhook(key).verify(body,
headers)`), which rejects timestamps older than a few minutes, and ignores an id it has seen
(a retry after a lost response is not a second request). While
AGENTOPS_WEBHOOK_LEGACY_SIGNATURES is true (deprecated) the older headers are sent beside
them: X-Agentops-Timestamp, X-Agentops-Signature (sha256=<hex HMAC over
"<timestamp>.<body>">) and X-Agentops-Delivery (the id).
"""

import hashlib
import json
import logging
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import EmailMessage
from django.db.models import Q
from django.urls import NoReverseMatch, reverse

from accounts.models import Role
from agentkit import signing

from . import one_tap
from .models import Approval, Delegation

log = logging.getLogger("agentops.notify")

# Sent beside the Standard Webhooks headers while the legacy scheme is on (deprecated).
DELIVERY_HEADER = "X-Agentops-Delivery"
EVENT = "approval.requested"
SLACK_PREFIX = "slack+"


class DeliveryError(Exception):
    """A delivery that may succeed later (5xx, 408, 429, timeout, connection): retried."""


class DeliveryRefused(Exception):
    """A delivery that will not succeed by retrying (4xx, bad URL, no secret): given up."""


def _cfg(name: str) -> Any:
    return settings.AGENTOPS[name]


# --- what is said --------------------------------------------------------------------------
def links(approval: Approval) -> dict[str, str]:
    base = _cfg("PUBLIC_URL").rstrip("/")
    return {
        "approval": base + _path("approvals:detail", approval.pk, f"/approvals/{approval.pk}/"),
        "run": base + _path("runs:detail", approval.run_id, f"/runs/{approval.run_id}/"),
    }


def _path(name: str, pk, fallback: str) -> str:
    # The pages may not be routed yet (UI issue); the fallback is where they are planned.
    try:
        return reverse(name, args=[pk])
    except NoReverseMatch:
        return fallback


def payload(approval: Approval) -> dict:
    """The JSON body of a generic webhook. Values from the model (args, question) are data."""
    run = approval.run
    urls = links(approval)
    return {
        "event": EVENT,
        "approval": {
            "id": str(approval.pk),
            "kind": approval.kind,
            "status": approval.status,
            "tool": approval.tool,
            "args": approval.masked(approval.args),
            "question": approval.question,
            "options": approval.options,
            "explanation": approval.explanation,
            "risk": approval.risk,
            "sampled": approval.sampled,
            "requested_at": approval.requested_at.isoformat(),
            "expires_at": approval.expires_at.isoformat(),
            "url": urls["approval"],
        },
        "run": {
            "id": str(run.pk),
            "agent": run.agent,
            "agent_title": run.agent_config.get("title", run.agent),
            "launched_by": run.launched_by.get_username() if run.launched_by_id else None,
            "url": urls["run"],
        },
    }


def headline(approval: Approval) -> str:
    what = approval.tool or "a question"
    if approval.kind == Approval.Kind.QUESTION:
        ask = "Question from" if not approval.tool or approval.tool == "ask_operator" else "Check"
        return _one_line(f"{ask} {approval.run.agent}: {approval.question}", 150)
    sample = " (sampled for review)" if approval.sampled else ""
    return _one_line(
        f"Approval needed: {what} ({approval.risk} risk) in {approval.run.agent}{sample}", 150
    )


def slack_payload(approval: Approval) -> dict:
    """Slack incoming-webhook body: a plain `text` fallback plus Block Kit blocks."""
    urls = links(approval)
    lines = [
        f"*{slack_escape(headline(approval))}*",
        f"*Why:* {slack_escape(approval.explanation)}",
    ]
    if approval.kind == Approval.Kind.ACTION:
        lines.append(
            f"*Call:* `{slack_escape(approval.tool)}` "
            + slack_escape(_args(approval.masked(approval.args), 1500))
        )
    elif approval.options:
        lines.append("*Options:* " + slack_escape(", ".join(map(str, approval.options))))
    return {
        "text": f"{headline(approval)}: {urls['approval']}",
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(lines)[:3000]}},
            {
                "type": "context",
                "elements": [
                    {
                        "type": "mrkdwn",
                        "text": slack_escape(
                            f"run {approval.run_id} · expires "
                            f"{approval.expires_at:%Y-%m-%d %H:%M} UTC"
                        ),
                    }
                ],
            },
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": "Open approval"},
                        "url": urls["approval"],
                    }
                ],
            },
        ],
    }


def slack_escape(text: str) -> str:
    # Slack mrkdwn control characters; model-written text must not become links or mentions.
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _args(args: Any, limit: int) -> str:
    text = json.dumps(args, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _one_line(text: str, limit: int) -> str:
    # Header-safe: model text may hold newlines, which an e-mail subject must not.
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- e-mail ----------------------------------------------------------------------------------
def approvers_to_email(approval: Approval) -> list:
    """The users the request e-mail goes to, one per address (each gets a personal link)."""
    users = get_user_model().objects.filter(is_active=True).exclude(email="")
    named = approval.run.agent_config.get("gates", {}).get("approvers") or []
    if named:
        # An approver away on leave: their delegate (an approver too) is told instead.
        delegates = Delegation.objects.active().filter(user__username__in=named)
        users = users.filter(
            Q(username__in=named)
            | Q(
                pk__in=delegates.values("delegate_id"),
                groups__name__in=[Role.APPROVER, Role.ADMIN],
            )
        )
    else:
        users = users.filter(Q(groups__name__in=[Role.APPROVER, Role.ADMIN]) | Q(is_superuser=True))
    by_address = {}
    for user in users.distinct().order_by("email", "pk"):
        by_address.setdefault(user.email, user)
    return list(by_address.values())


def approver_emails(approval: Approval) -> list[str]:
    return [user.email for user in approvers_to_email(approval)]


def one_tap_url(approval: Approval, user) -> str:
    """The approver's personal, single-use decision link (approvals/one_tap.py)."""
    token = one_tap.token_for(approval, user)
    return _cfg("PUBLIC_URL").rstrip("/") + reverse("approvals:one_tap", args=[token])


def send_email(approval_id: str) -> int:
    """Send the request e-mail, one per approver (each carries that approver's one-tap link);
    DeliveryError (retried) when the backend fails. Returns how many were sent."""
    approval = Approval.objects.select_related("run", "run__launched_by").get(pk=approval_id)
    return _send(
        approval,
        approvers_to_email(approval),
        subject=f"[agentops] {headline(approval)}",
        key="approval-requested",
    )


def send_escalation_email(approval_id: str, tier: int) -> int:
    """Tell an escalation tier's people (approvals/escalation.py); like `send_email`."""
    approval = Approval.objects.select_related("run", "run__launched_by").get(pk=approval_id)
    escalation = approval.escalations.filter(tier=tier).first()
    if escalation is None:
        return 0
    users = (
        get_user_model()
        .objects.filter(is_active=True, username__in=escalation.notified)
        .exclude(email="")
        .order_by("email")
    )
    waited = int((escalation.at - approval.requested_at).total_seconds() // 60)
    return _send(
        approval,
        list(users),
        subject=f"[agentops] Escalated, no decision after {waited} min: {headline(approval)}",
        key=f"approval-escalated:{tier}",
        intro=f"Nobody has decided this after {waited} minutes; you are escalation tier {tier}.",
    )


def _send(approval: Approval, recipients: list, *, subject: str, key: str, intro: str = "") -> int:
    if not recipients or approval.status != Approval.Status.PENDING:
        return 0
    urls = links(approval)
    body = [*([intro, ""] if intro else []), headline(approval), "", f"Why: {approval.explanation}"]
    if approval.kind == Approval.Kind.ACTION:
        body += [
            f"Tool: {approval.tool}",
            f"Arguments: {_args(approval.masked(approval.args), 5000)}",
        ]
    else:
        body.append(f"Question: {approval.question}")
        if approval.options:
            body.append("Options: " + ", ".join(map(str, approval.options)))
    body += [
        f"Risk: {approval.risk}" + (" (sampled for review)" if approval.sampled else ""),
        f"Expires: {approval.expires_at:%Y-%m-%d %H:%M} UTC",
        "",
        f"Decide: {urls['approval']}",
        f"Run: {urls['run']}",
    ]
    sent = 0
    for user in recipients:
        personal = [
            *body,
            "",
            f"Decide on your phone (a one-time link for {user.get_username()} only, "
            f"sign-in required): {one_tap_url(approval, user)}",
        ]
        message = EmailMessage(
            subject=_one_line(subject, 200),
            body="\n".join(personal),
            to=[user.email],
            # Backends that honour it (the demo outbox) store a retried send once.
            headers={"X-Idempotency-Key": f"{key}:{approval.pk}:{user.pk}"},
        )
        try:
            sent += message.send()
        except OSError as exc:  # smtplib errors are OSErrors
            raise DeliveryError(f"e-mail for approval {approval.pk} failed: {exc}") from exc
    return sent


# --- webhooks --------------------------------------------------------------------------------
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


def delivery_id(approval_id, url: str) -> str:
    return hashlib.sha256(f"{approval_id}|{url}".encode()).hexdigest()[:32]


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    # A redirected POST would be replayed as a GET elsewhere; treat 3xx as a refusal.
    def redirect_request(self, *args, **kwargs):
        return None


_opener = urllib.request.build_opener(_NoRedirects)


def deliver_webhook(approval_id: str, url: str) -> int:
    """POST the signed payload; returns the HTTP status. DeliveryError means retry later,
    DeliveryRefused means retrying cannot help."""
    approval = Approval.objects.select_related("run", "run__launched_by").get(pk=approval_id)
    post_to, slack = target(url)
    if urlsplit(post_to).scheme not in ("http", "https"):
        raise DeliveryRefused(f"webhook URL must be http(s): {post_to!r}")
    keys = signing_keys()
    if not keys and not slack:
        raise DeliveryRefused("AGENTOPS_WEBHOOK_SECRET is not set; generic webhooks are not sent")
    body = json.dumps(
        slack_payload(approval) if slack else payload(approval), ensure_ascii=False
    ).encode()
    message_id = delivery_id(approval.pk, url)
    headers = {"Content-Type": "application/json", "User-Agent": "agentops-webhook/1"}
    if keys:
        headers.update(signing.sign(keys, message_id, body))
        if signing.legacy_accepted():
            headers[DELIVERY_HEADER] = message_id
    else:  # a Slack URL without a key: still one id for every retry
        headers[signing.ID_HEADER] = message_id
    request = urllib.request.Request(post_to, data=body, headers=headers, method="POST")  # noqa: S310 (scheme checked above)
    try:
        with _opener.open(request, timeout=_cfg("WEBHOOK_TIMEOUT_SECONDS")) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        if exc.code >= 500 or exc.code in (408, 429):
            raise DeliveryError(f"webhook {post_to} answered {exc.code}") from None
        raise DeliveryRefused(f"webhook {post_to} answered {exc.code}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise DeliveryError(f"webhook {post_to} unreachable: {exc}") from None
