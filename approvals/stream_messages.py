"""The approvals group's live messages, rendered once per change per web process.

Approvals change at human pace, so each change re-renders the whole pending queue in its
order (re-sorting beats patching rows), the dashboard's list, the navigation's count and the
changed approval's state for open decision screens. The render cache is the runs' one
(runs/live.py): a hundred open pages still cost one render per change.
"""

from typing import Any

from django.template.loader import render_to_string

from accounts import teams
from runs import live

from . import listing, presence
from .models import Approval

QUEUE = "approvals/queue.html"
DETAIL = "approvals/detail.html"


def render_approval_event(approval_id: Any, agents: teams.AgentScope) -> dict:
    """The approvals group's messages for one change (None: only the current state), as seen
    by those whose teams reach `agents` (rendered once per such audience)."""
    visible = Approval.objects.filter(agents.q("run__agent"))
    approval = visible.select_related("decided_by", "grant").filter(pk=approval_id).first()
    pending = visible.pending()
    rows = presence.mark_claims(listing.queue(pending))
    ctx = {
        "approval": approval,
        "rows": rows,
        "pending": listing.oldest_riskiest(pending),
        "pending_count": pending.count(),
        "oob": True,
    }
    html = [
        render_to_string(QUEUE + "#approval-notices", ctx),
        # Rows in their own message, so they keep their table context.
        render_to_string(QUEUE + "#approval-rows-live", ctx),
    ]
    if approval is not None:
        # The decision screen's state (open, or decided by whom and when), the same bytes for
        # every viewer: the page's script turns its controls off once it says decided.
        html.append(render_to_string(DETAIL + "#approval-state", ctx))
    return {"html": html}


def render_presence(approval_id: Any, user) -> str:
    """Who else has the approval open and who is on it, for one viewer (their own claim
    button), or "" when the approval is gone."""
    approval = Approval.objects.filter(pk=approval_id).first()
    if approval is None:
        return ""
    ctx = presence_context(approval, user)
    return render_to_string(DETAIL + "#approval-presence", {**ctx, "oob": True})


def presence_context(approval: Approval, user) -> dict:
    viewers = presence.viewers(approval)
    mine = next((v for v in viewers if v.user_id == user.pk), None)
    return {
        "approval": approval,
        "others": [v for v in viewers if v.user_id != user.pk],
        "my_claim": mine.claimed_at if mine else None,
        "can_claim": approval.status == Approval.Status.PENDING
        and teams.may(user, teams.Power.DECIDE, approval.run.agent),
    }


async def approval_payload(event: dict, agents: teams.AgentScope) -> dict:
    """An approvals group event with its HTML: the queue, its count, the approval's state,
    of the approvals the audience's teams see."""
    key = ("approval", event["event"], agents)
    rendered = await live.cache.get(key, render_approval_event, event["approval_id"], agents)
    return {**event, **rendered}
