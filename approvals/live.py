"""The approvals group's live messages, rendered once per change per web process.

Approvals change at human pace, so each change re-renders the whole pending queue in its
order (re-sorting beats patching rows), the dashboard's list, the navigation's count and the
changed approval's state for open decision screens. The render cache is the runs' one
(runs/live.py): a hundred open pages still cost one render per change.
"""

from typing import Any

from django.template.loader import render_to_string

from runs import live

from . import listing
from .models import Approval

QUEUE = "approvals/queue.html"


def render_approval_event(approval_id: Any) -> dict:
    """The approvals group's messages for one change (None: only the current state)."""
    approval = Approval.objects.select_related("decided_by").filter(pk=approval_id).first()
    ctx = {
        "approval": approval,
        "rows": listing.queue(),
        "pending": listing.oldest_riskiest(),
        "pending_count": Approval.objects.pending().count(),
        "oob": True,
    }
    return {
        "html": [
            render_to_string(QUEUE + "#approval-notices", ctx),
            # Rows in their own message, so they keep their table context.
            render_to_string(QUEUE + "#approval-rows-live", ctx),
        ]
    }


async def approval_payload(event: dict) -> dict:
    """An approvals group event with its HTML: the queue, its count, the approval's state."""
    key = ("approval", event["event"])
    return {**event, **await live.cache.get(key, render_approval_event, event["approval_id"])}
