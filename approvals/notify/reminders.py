"""Reminders: an approval nobody has decided is brought up again before it expires and before
it escalates, through the same channels as the request (e-mail, webhooks).
Why and how: docs/design/modules.md."""

import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from agentkit.agents import GateRules
from runs.models import Run

from ..models import Approval, ApprovalReminder
from .escalation import chain

DEFAULT_SHARES = GateRules.reminders
DEFAULT_ESCALATION_LEAD = GateRules.remind_before_escalation


@dataclass(frozen=True)
class Reminder:
    key: str  # "expiry:0.5", "escalation:1"
    at: datetime  # when it is due
    ahead_of: datetime  # the deadline or the escalation it warns of
    what: str  # "expires" or "escalates to tier 1"


def planned(approval: Approval) -> list[Reminder]:
    """Every reminder this approval gets while nobody decides it, in time order."""
    gates = approval.run.agent_config.get("gates") or {}
    start, deadline = approval.requested_at, approval.expires_at
    window = deadline - start
    found = []
    for share in gates.get("reminders", DEFAULT_SHARES) or ():
        share = float(share)
        if 0 < share < 1:
            found.append(
                Reminder(f"expiry:{share:g}", deadline - window * share, deadline, "expires")
            )
    lead = float(gates.get("remind_before_escalation", DEFAULT_ESCALATION_LEAD) or 0)
    if 0 < lead < 1:
        for number, tier in enumerate(chain(approval.run), start=1):
            after = timedelta(seconds=int(tier.get("after_seconds") or 0))
            fires = start + after
            if after and fires < deadline:
                found.append(
                    Reminder(
                        f"escalation:{number}",
                        fires - after * lead,
                        fires,
                        f"escalates to tier {number}",
                    )
                )
    return sorted(found, key=lambda r: r.at)


def due(approval: Approval, now: datetime, sent: set[str]) -> tuple[Reminder | None, list[str]]:
    """(the reminder to send now, or None; the keys of every reminder whose time has come,
    to record as done). Of several that are due at once only the latest is sent."""
    ready = [r for r in planned(approval) if r.at <= now < r.ahead_of and r.key not in sent]
    return (ready[-1] if ready else None), [r.key for r in ready]


def remind_due(
    on_reminded: Callable[[str, str], None], now: datetime | None = None, *, batch: int = 500
) -> int:
    """Record every reminder that is due and not sent yet, and call `on_reminded(approval id,
    key)` after each commits (tasks.approval_reminded queues the deliveries); returns how
    many were sent."""
    now = now or timezone.now()
    pending = (
        Approval.objects.pending()
        .filter(expires_at__gt=now, run__status__in=Run.ACTIVE_STATUSES)
        .select_related("run")
        .order_by("expires_at")[:batch]
    )
    sent_count = 0
    for approval in pending:
        sent = set(approval.reminders.values_list("key", flat=True))
        reminder, keys = due(approval, now, sent)
        if reminder is None:
            continue
        try:
            with transaction.atomic():
                for key in keys:
                    ApprovalReminder.objects.create(approval=approval, key=key, at=now)
                transaction.on_commit(
                    functools.partial(on_reminded, str(approval.pk), reminder.key)
                )
        except IntegrityError:
            continue  # another sweep sent it first
        sent_count += 1
    return sent_count


def describe(approval: Approval, key: str) -> str:
    """What a reminder says, in one line: "Nobody has decided this yet; it expires at
    2026-01-31 12:00 UTC (in 30 min): then it expires: the call is not executed…"."""
    reminder = next((r for r in planned(approval) if r.key == key), None)
    if reminder is None:
        return "Nobody has decided this yet."
    left = max(0, int((reminder.ahead_of - timezone.now()).total_seconds() // 60))
    when = f"{reminder.ahead_of:%Y-%m-%d %H:%M} UTC (in {left} min)"
    if reminder.what == "expires":
        return f"Nobody has decided this yet; it expires at {when}: if nobody decides, " + (
            approval.expiry_outcome
        )
    return f"Nobody has decided this yet; it {reminder.what} at {when}."
