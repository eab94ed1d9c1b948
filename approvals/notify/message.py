"""What an approval request says, whatever the channel: the links into the site, the JSON
body of a generic webhook, the one-line headline, and the Slack-compatible body.

Settings (settings.AGENTOPS, from the environment): PUBLIC_URL (AGENTOPS_PUBLIC_URL), where
links in messages point.
"""

import json
from typing import Any

from django.conf import settings
from django.urls import NoReverseMatch, reverse

from agentkit import previews

from ..models import Approval

EVENT = "approval.requested"


def _cfg(name: str) -> Any:
    return settings.AGENTOPS[name]


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
            "launched_by": run.launched_by.get_username() if run.launched_by else None,
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
        changes = previews.as_text(approval.masked(approval.preview), 1200)
        if changes:
            # Escaped like every value from the call: a preview quotes records and arguments.
            lines.append(f"*What it would change:*\n```{slack_escape(changes)}```")
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
