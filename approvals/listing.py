"""The orders approvals are listed in, shared by the queue, the dashboard and live pushes;
and the queue's keyset pages.

The queue is paged by the last row seen, not by a page number: approvals leave it as they are
decided, and a page number then shifts the rows under the approver (deciding page 1 moved
page 2's first rows onto page 1, and "next" skipped them). A link names the row its page
starts after (`after`) or ends before (`before`), in queue order, read through
approval_queue_idx whatever the depth (as runs/paging.py does for runs).
"""

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db.models import Q, QuerySet

from .models import Approval

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

# A page of the queue: what an approver works through at once, and what a live push renders.
QUEUE_PAGE = 50
DASHBOARD_LIMIT = 10


def in_queue_order(approvals: QuerySet | None = None) -> QuerySet:
    """Pending approvals, riskiest first, then the nearest deadline (then the oldest id, so
    pages do not overlap)."""
    approvals = Approval.objects.pending() if approvals is None else approvals
    return approvals.select_related("run").order_by("risk_rank", "expires_at", "pk")


def queue(approvals: QuerySet | None = None) -> list[Approval]:
    """The first page of the queue."""
    return list(in_queue_order(approvals)[:QUEUE_PAGE])


def oldest_riskiest(
    approvals: QuerySet | None = None, limit: int = DASHBOARD_LIMIT
) -> list[Approval]:
    """The dashboard's pending approvals: riskiest first, then the longest waiting."""
    approvals = Approval.objects.pending() if approvals is None else approvals
    return list(approvals.select_related("run").order_by("risk_rank", "requested_at")[:limit])


@dataclass(frozen=True)
class Cursor:
    """An approval's place in the queue order: (risk rank, deadline, id)."""

    risk_rank: int
    expires_at: datetime
    id: uuid.UUID

    @classmethod
    def of(cls, approval: Approval) -> "Cursor":
        return cls(approval.risk_rank, approval.expires_at, approval.pk)

    @property
    def key(self) -> tuple[int, datetime, uuid.UUID]:
        """For comparing positions in Python, in queue order (a UUID compares as the
        database's, by its bytes)."""
        return (self.risk_rank, self.expires_at, self.id)

    @property
    def token(self) -> str:
        """As a link carries it: the rank, microseconds since 1970, the id in hex."""
        return f"{self.risk_rank}.{(self.expires_at - _EPOCH) // _MICROSECOND}.{self.id.hex}"

    @classmethod
    def parse(cls, token: str | None) -> "Cursor | None":
        """The cursor a link carried; None for anything else (the first page is shown)."""
        parts = (token or "").split(".")
        if len(parts) != 3 or not all(p.isdigit() and len(p) <= 18 for p in parts[:2]):
            return None
        try:
            moment = _EPOCH + int(parts[1]) * _MICROSECOND
            return cls(int(parts[0]), moment, uuid.UUID(hex=parts[2]))
        except (ValueError, OverflowError):
            return None

    def later(self) -> Q:
        """The approvals after this one in queue order."""
        return (
            Q(risk_rank__gt=self.risk_rank)
            | Q(risk_rank=self.risk_rank, expires_at__gt=self.expires_at)
            | Q(risk_rank=self.risk_rank, expires_at=self.expires_at, id__gt=self.id)
        )

    def earlier(self) -> Q:
        return (
            Q(risk_rank__lt=self.risk_rank)
            | Q(risk_rank=self.risk_rank, expires_at__lt=self.expires_at)
            | Q(risk_rank=self.risk_rank, expires_at=self.expires_at, id__lt=self.id)
        )


@dataclass(frozen=True)
class QueuePage:
    rows: list[Approval]
    is_first: bool  # nothing riskier before it: the live push replaces it
    riskier: str | None  # `before` token of the page before
    next: str | None  # `after` token of the page after


def queue_page(approvals: QuerySet, *, after: str | None, before: str | None) -> QueuePage:
    """One page of the queue (`approvals`: pending ones, not yet ordered): the first, the one
    after the approval `after` names, or the one before the approval `before` names."""
    ordered, size = in_queue_order(approvals), QUEUE_PAGE
    cursor = Cursor.parse(after)
    if cursor is not None:
        rows = list(ordered.filter(cursor.later())[: size + 1])
        return _page(rows[:size], more_after=len(rows) > size, more_before=True)
    cursor = Cursor.parse(before)
    if cursor is not None:
        rows = list(ordered.filter(cursor.earlier()).reverse()[: size + 1])
        if len(rows) > size:
            return _page(rows[:size][::-1], more_after=True, more_before=True)
        if len(rows) == size:
            return _page(rows[::-1], more_after=True, more_before=False)
        # Fewer riskier approvals than a page (some were decided): the first page.
    rows = list(ordered[: size + 1])
    return _page(rows[:size], more_after=len(rows) > size, more_before=False)


def _page(rows: list[Approval], *, more_after: bool, more_before: bool) -> QueuePage:
    return QueuePage(
        rows=rows,
        is_first=not more_before,
        riskier=Cursor.of(rows[0]).token if more_before and rows else None,
        next=Cursor.of(rows[-1]).token if more_after and rows else None,
    )
