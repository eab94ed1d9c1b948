"""The orders approvals are listed in, shared by the queue, the dashboard and live pushes."""

from django.db.models import Case, IntegerField, QuerySet, Value, When

from .models import Approval

QUEUE_LIMIT = 500
DASHBOARD_LIMIT = 10

# critical = 0 ... none = 4, so ascending order puts the riskiest first.
RISK_RANK = Case(
    *[When(risk=r, then=Value(i)) for i, r in enumerate(reversed(Approval.Risk.values))],
    default=Value(99),
    output_field=IntegerField(),
)


def queue(approvals: QuerySet | None = None, limit: int = QUEUE_LIMIT) -> list[Approval]:
    """Pending approvals, riskiest first, then the nearest deadline."""
    approvals = Approval.objects.pending() if approvals is None else approvals
    return list(
        approvals.select_related("run")
        .annotate(risk_rank=RISK_RANK)
        .order_by("risk_rank", "expires_at")[:limit]
    )


def oldest_riskiest(limit: int = DASHBOARD_LIMIT) -> list[Approval]:
    """The dashboard's pending approvals: riskiest first, then the longest waiting."""
    return list(
        Approval.objects.pending()
        .select_related("run")
        .annotate(risk_rank=RISK_RANK)
        .order_by("risk_rank", "requested_at")[:limit]
    )
