"""The Slack app: approval requests with Approve / Reject / Open buttons, decided in Slack.
Why and how: docs/design/modules.md."""

import logging
import uuid
from typing import Any
from urllib.parse import parse_qs

from django.conf import settings
from django.contrib.auth import get_user_model
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.webhook import WebhookClient

from accounts import teams
from agentkit import storable
from runs.models import args_hash

from ... import decisions
from ...models import Approval, SlackMessage, SlackUser
from ..message import headline, links, slack_escape, slack_payload
from ..reminders import describe

log = logging.getLogger("agentops.slack")

ACTIONS = ("approve", "reject")
REJECT_REASON = "Rejected from Slack"
TIMEOUT_SECONDS = 5


def _cfg(name: str) -> Any:
    return settings.AGENTOPS[name]


def enabled() -> bool:
    return bool(_cfg("SLACK_BOT_TOKEN") and _cfg("SLACK_SIGNING_SECRET") and _cfg("SLACK_CHANNEL"))


def client() -> WebClient:
    return WebClient(
        token=_cfg("SLACK_BOT_TOKEN"), base_url=_cfg("SLACK_API_URL"), timeout=TIMEOUT_SECONDS
    )


# --- what is posted --------------------------------------------------------------------------
def request_blocks(approval: Approval) -> list[dict]:
    """The incoming-webhook card (model text escaped) with the app's buttons."""
    card = slack_payload(approval)["blocks"][:2]
    value = f"{approval.pk}:{args_hash(approval.tool, approval.args or {})}"
    if approval.preview:
        # The preview the message shows: an approve after the data changed is refused.
        value += f":{approval.preview['hash']}"
    buttons: list[dict] = []
    if approval.kind == Approval.Kind.ACTION:
        approve = {
            "type": "button",
            "action_id": "approve",
            "text": {"type": "plain_text", "text": "Approve"},
            "style": "primary",
            "value": value,
        }
        if approval.needs_confirmation:
            # Slack's own "are you sure", with the call's effect in the tool's words.
            approve["confirm"] = {
                "title": {"type": "plain_text", "text": "Approve this call?"},
                "text": {
                    "type": "mrkdwn",
                    "text": slack_escape(approval.masked(approval.effect()))[:300],
                },
                "confirm": {"type": "plain_text", "text": "Approve"},
                "deny": {"type": "plain_text", "text": "Cancel"},
            }
        buttons.append(approve)
        buttons.append(
            {
                "type": "button",
                "action_id": "reject",
                "text": {"type": "plain_text", "text": "Reject"},
                "style": "danger",
                "value": value,
            }
        )
    buttons.append(
        {
            "type": "button",
            "action_id": "open",
            "text": {"type": "plain_text", "text": "Open"},
            "url": links(approval)["approval"],
        }
    )
    return [*card, {"type": "actions", "block_id": "decide", "elements": buttons}]


def decided_blocks(approval: Approval) -> list[dict]:
    """The card once decided: no buttons, who decided and when."""
    who = approval.decided_by.get_username() if approval.decided_by else "the system"
    when = f"{approval.decided_at:%Y-%m-%d %H:%M:%S} UTC" if approval.decided_at else ""
    line = f"*{approval.status.capitalize()}* by {slack_escape(who)} at {when}"
    if approval.reason:
        line += f": {slack_escape(approval.reason)[:500]}"
    card = slack_payload(approval)["blocks"][:2]
    return [
        *card,
        {"type": "section", "block_id": "outcome", "text": {"type": "mrkdwn", "text": line}},
    ]


def channel_for(approval: Approval) -> str:
    """The first owning team's own channel (by team name), else the installation's."""
    owners = teams.teams_owning(approval.run.agent).exclude(slack_channel="")
    return next((t.slack_channel for t in owners), "") or _cfg("SLACK_CHANNEL")


def post_request(approval_id: str) -> str:
    """Post the approval to the channel once; returns the message's ts ("" when not posted).
    A SlackApiError is raised for the task to retry."""
    approval = Approval.objects.select_related("run", "run__launched_by").get(pk=approval_id)
    posted = SlackMessage.objects.filter(approval=approval).first()
    if posted is not None or approval.status != Approval.Status.PENDING:
        return posted.ts if posted else ""
    response = client().chat_postMessage(
        channel=channel_for(approval),
        text=headline(approval),
        blocks=request_blocks(approval),
    )
    message, _ = SlackMessage.objects.get_or_create(
        approval=approval, defaults={"channel": response["channel"], "ts": response["ts"]}
    )
    return message.ts


def post_reminder(approval_id: str, key: str) -> str:
    """A reminder (approvals/notify/reminders.py) as a reply in the request's thread, shown in
    the channel too: those who decide in Slack are reminded where they would decide. Nothing
    for a request never posted or decided since. Returns the reply's ts ("" when none)."""
    approval = Approval.objects.select_related("run").filter(pk=approval_id).first()
    message = SlackMessage.objects.filter(approval_id=approval_id).first()
    if approval is None or message is None or approval.status != Approval.Status.PENDING:
        return ""
    response = client().chat_postMessage(
        channel=message.channel,
        thread_ts=message.ts,
        reply_broadcast=True,
        text=f"Reminder: {slack_escape(describe(approval, key))}",
    )
    return response["ts"]


def refresh_request(approval: Approval) -> None:
    """The pending request's message again, as the approval now stands (a fresh preview)."""
    message = SlackMessage.objects.filter(approval=approval).first()
    if message is None:
        return
    try:
        client().chat_update(
            channel=message.channel,
            ts=message.ts,
            text=headline(approval),
            blocks=request_blocks(approval),
        )
    except SlackApiError as exc:
        log.warning("approval %s: Slack message not refreshed: %s", approval.pk, exc)


def update_message(approval: Approval) -> None:
    message = SlackMessage.objects.filter(approval=approval).first()
    if message is None:
        return
    try:
        client().chat_update(
            channel=message.channel,
            ts=message.ts,
            text=f"{headline(approval)}: {approval.status}",
            blocks=decided_blocks(approval),
        )
    except SlackApiError as exc:  # the decision stands; the message is only a view of it
        log.warning("approval %s: Slack message not updated: %s", approval.pk, exc)


# --- what comes back -------------------------------------------------------------------------
def verify(body: bytes, headers) -> bool:
    """Slack's request signature over the raw body, with a fresh timestamp. A timestamp that
    is not unix seconds is a bad signature, not an error (the SDK would raise on it)."""
    timestamp = headers.get("X-Slack-Request-Timestamp") or ""
    if not (timestamp.isascii() and timestamp.isdigit()) or len(timestamp) > 12:
        return False
    try:
        return SignatureVerifier(_cfg("SLACK_SIGNING_SECRET")).is_valid(
            body=body, timestamp=timestamp, signature=headers.get("X-Slack-Signature")
        )
    except (ValueError, TypeError):
        return False


def shape_error(payload: dict) -> str:
    """Why a signed payload is not shaped as Slack's interactions are, or "". Checked before
    anything reads it, so a payload Slack would never send is a 400, not a 500."""
    if not isinstance(payload.get("type"), str):
        return "type must be a string"
    if payload["type"] != "block_actions":
        return ""
    actions = payload.get("actions")
    if not isinstance(actions, list) or not all(isinstance(a, dict) for a in actions):
        return "actions must be a list of objects"
    for action in actions:
        for key in ("action_id", "value"):
            if key in action and not isinstance(action[key], str):
                return f"actions[].{key} must be a string"
    for key in ("team", "user"):
        if key in payload and not (
            isinstance(payload[key], dict) and isinstance(payload[key].get("id", ""), str)
        ):
            return f"{key} must be an object with a string id"
    if not isinstance(payload.get("response_url", ""), str):
        return "response_url must be a string"
    return ""


def user_for(team_id: str, slack_id: str):
    """The active agentops user this Slack user is, or None."""
    found = SlackUser.objects.select_related("user").filter(team_id=team_id, slack_id=slack_id)
    mapping = found.first()
    if mapping is not None:
        return mapping.user if mapping.user.is_active else None
    if not _cfg("SLACK_MAP_BY_EMAIL"):
        return None
    try:
        profile = client().users_info(user=slack_id)["user"].get("profile", {})
    except SlackApiError:
        return None
    email = (profile.get("email") or "").strip()
    matches = list(get_user_model().objects.filter(is_active=True, email__iexact=email)[:2])
    if not email or len(matches) != 1:
        return None  # unknown, or ambiguous: never guess who someone is
    SlackUser.objects.get_or_create(
        team_id=team_id, slack_id=slack_id, defaults={"user": matches[0]}
    )
    return matches[0]


def handle_action(payload: dict) -> str:
    """Apply one button press; returns what the presser was told ("" when nothing)."""
    if payload.get("type") != "block_actions" or not payload.get("actions"):
        return ""
    action = payload["actions"][0]
    if action.get("action_id") not in ACTIONS:
        return ""  # Open is a link: nothing to do here
    approval_id, _, shown = str(action.get("value", "")).partition(":")
    shown, _, shown_preview = shown.partition(":")
    user = user_for(
        str((payload.get("team") or {}).get("id", "")),
        str((payload.get("user") or {}).get("id", "")),
    )
    if user is None:
        return _tell(
            payload, "Nothing was decided: your Slack account is not linked to an agentops user."
        )
    approval = Approval.objects.filter(pk=approval_id).first() if _uuid(approval_id) else None
    if approval is None:
        return _tell(payload, "Nothing was decided: no such approval.")
    decision = action["action_id"]
    if decision == "approve" and approval.risk in Approval.CONFIRM_RISKS:
        return _tell(
            payload,
            f"Not approved: a {approval.risk}-risk call is approved in agentops, where its exact "
            f"effect is confirmed: {links(approval)['approval']}",
        )
    try:
        decided = decisions.decide(
            approval.pk,
            user=user,
            decision=decision,
            reason=REJECT_REASON if decision == "reject" else "",
            shown_args_hash=shown if decision == "approve" else None,
            shown_preview_hash=shown_preview or None,
            via="slack",
        )
    except decisions.PreviewChanged as exc:
        approval.preview = exc.preview
        refresh_request(approval)
        return _tell(payload, f"Nothing was decided: {exc.message} The message now shows it.")
    except decisions.DecisionConflict as exc:
        if exc.approval_status and exc.approval_status != Approval.Status.PENDING:
            return _tell(payload, f"Already decided: {exc.message}")
        # Still pending: a stale card, or a vote already cast. Say what happened.
        return _tell(payload, f"Nothing was decided: {exc.message}")
    except decisions.DecisionError as exc:
        return _tell(payload, f"Nothing was decided: {exc.message}")
    except Approval.DoesNotExist:
        return _tell(payload, "Nothing was decided: no such approval.")
    if decided.status == Approval.Status.PENDING:
        return _tell(payload, "Your approval is recorded; more approvers are needed.")
    # The message is updated after the commit, as for a decision made anywhere else
    # (decisions.decided -> tasks.update_slack_message).
    return ""


def _tell(payload: dict, text: str) -> str:
    """An ephemeral reply to the presser only, on the action's response_url (from the signed
    payload)."""
    url = payload.get("response_url")
    if url:
        try:
            WebhookClient(url, timeout=TIMEOUT_SECONDS).send(
                text=text, response_type="ephemeral", replace_original=False
            )
        except Exception:  # the reply is a courtesy; what was decided is already settled
            log.warning("Slack reply not delivered", exc_info=True)
    return text


def _uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def parse(body: bytes) -> dict | None:
    """The interaction payload of a form-encoded Slack request, or None."""
    try:
        raw = parse_qs(body.decode())["payload"][0]
        payload = storable.loads(raw)
    except (KeyError, IndexError, ValueError, UnicodeDecodeError):
        return None
    return payload if isinstance(payload, dict) else None
