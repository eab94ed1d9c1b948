"""Who has an approval open, and who said "I'm on it".

Each open decision screen is a row (ApprovalWatch) for as long as its live socket is
connected (approvals/consumers.py). A claim is a mark on the claimer's rows: it is released
when their last screen of the approval closes (disconnect), and it counts only while the
approval is pending (a decision or the expiry releases it). A claim never blocks anyone: it
only tells the others the approval is being handled. A row whose socket's server died is
ignored once `seen_at` is older than STALE_AFTER (the socket refreshes it every HEARTBEAT).
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Min
from django.utils import timezone

from .models import Approval, ApprovalWatch

HEARTBEAT = timedelta(seconds=20)
STALE_AFTER = timedelta(seconds=60)


@dataclass(frozen=True)
class Viewer:
    username: str
    user_id: int
    claimed_at: datetime | None


def _fresh():
    return ApprovalWatch.objects.filter(seen_at__gte=timezone.now() - STALE_AFTER)


def watch(approval_id, user, channel_name: str) -> None:
    ApprovalWatch.objects.update_or_create(
        channel_name=channel_name,
        defaults={"approval_id": approval_id, "user": user, "seen_at": timezone.now()},
    )


def unwatch(channel_name: str) -> bool:
    """The socket closed. True when it released a claim (its user has no other screen of the
    approval open), so the queue should be told."""
    row = ApprovalWatch.objects.filter(channel_name=channel_name).first()
    if row is None:
        return False
    row.delete()
    if row.claimed_at is None:
        return False
    others = _fresh().filter(approval_id=row.approval_id, user_id=row.user_id)
    return not others.exists()


def refresh(channel_name: str) -> None:
    ApprovalWatch.objects.filter(channel_name=channel_name).update(seen_at=timezone.now())


def claim(approval: Approval, user) -> bool:
    """Mark the user's open screens of a pending approval as "on it". False when they have
    none open (a claim lives with a live screen) or the approval is no longer pending."""
    if approval.status != Approval.Status.PENDING:
        return False
    return bool(
        _fresh()
        .filter(approval=approval, user=user, claimed_at__isnull=True)
        .update(claimed_at=timezone.now())
        or _fresh().filter(approval=approval, user=user, claimed_at__isnull=False).exists()
    )


def release(approval: Approval, user) -> None:
    ApprovalWatch.objects.filter(approval=approval, user=user).update(claimed_at=None)


def viewers(approval: Approval) -> list[Viewer]:
    """Everyone with the approval open now, the first to claim it first; claims only while
    it is pending."""
    pending = approval.status == Approval.Status.PENDING
    rows = (
        _fresh()
        .filter(approval=approval)
        .values("user_id", "user__username")
        .annotate(claimed=Min("claimed_at"), since=Min("opened_at"))
    )
    found = [
        Viewer(r["user__username"], r["user_id"], r["claimed"] if pending else None) for r in rows
    ]
    far = timezone.now() + timedelta(days=3650)
    return sorted(found, key=lambda v: (v.claimed_at or far, v.username))


def mark_claims(approvals: list[Approval]) -> list[Approval]:
    """Sets `claimed_by` (the usernames on it) on each of the queue's rows; one query."""
    found = claimers([a.pk for a in approvals])
    for a in approvals:
        a.claimed_by = found.get(a.pk, [])
    return approvals


def claimers(approval_ids: list) -> dict:
    """{approval id: [usernames on it]}."""
    rows = (
        _fresh()
        .filter(approval_id__in=approval_ids, claimed_at__isnull=False)
        .values_list("approval_id", "user__username")
        .distinct()
    )
    found: dict = {}
    for approval_id, username in rows:
        found.setdefault(approval_id, []).append(username)
    for names in found.values():
        names.sort()
    return found
