"""The orders approvals are listed in, shared by the queue, the dashboard and live pushes."""

from django.db.models import QuerySet

from .models import Approval

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
