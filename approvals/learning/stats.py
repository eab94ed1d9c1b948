"""Rubber-stamp guard: how approvers decide, so an admin can see approving turn into clicking.
Why and how: docs/design/modules.md."""

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count, F, Q
from django.utils import timezone

from runs import charts

from ..models import Approval, ApprovalView, ApprovalVote
from .models import AutoApproveRule

DEFAULT_FAST_DECISION_SECONDS = 5.0
LIST_LIMIT = 50
RUBBER_STAMP_MIN_DECISIONS = 5
HIGH_RISKS = frozenset({Approval.Risk.HIGH, Approval.Risk.CRITICAL})

# Time from request to decision, for the dashboard's distribution chart: (label, from, to).
DECISION_BUCKETS = [
    ("<1m", timedelta(0), timedelta(minutes=1)),
    ("1-5m", timedelta(minutes=1), timedelta(minutes=5)),
    ("5-15m", timedelta(minutes=5), timedelta(minutes=15)),
    ("15-60m", timedelta(minutes=15), timedelta(hours=1)),
    ("1-4h", timedelta(hours=1), timedelta(hours=4)),
    (">4h", timedelta(hours=4), timedelta(days=3650)),
]


def fast_decision_seconds() -> float:
    return float(settings.AGENTOPS.get("FAST_DECISION_SECONDS", DEFAULT_FAST_DECISION_SECONDS))


@dataclass
class _Tally:
    decisions: int = 0
    approved: int = 0
    rejected: int = 0
    answered: int = 0
    edits: int = 0
    expiries: int = 0
    fast: int = 0
    unopened: int = 0
    seconds: list[float] = field(default_factory=list)
    high_risk_seconds: list[float] = field(default_factory=list)
    contradicted: int = 0

    def add(self, vote: ApprovalVote, fast_seconds: float) -> None:
        self.decisions += 1
        if vote.decision == ApprovalVote.Decision.APPROVE:
            self.approved += 1
        elif vote.decision == ApprovalVote.Decision.REJECT:
            self.rejected += 1
        else:
            self.answered += 1
        self.edits += int(vote.edited)
        if vote.seconds_open is None:
            self.unopened += 1
        else:
            self.seconds.append(vote.seconds_open)
        if vote.approval.risk in HIGH_RISKS:
            # Never opened counts as no time at all: the strongest sign of a rubber stamp.
            self.high_risk_seconds.append(vote.seconds_open or 0.0)
        if is_fast(vote, fast_seconds):
            self.fast += 1

    def as_dict(self) -> dict:
        judged = self.approved + self.rejected
        return {
            "decisions": self.decisions,
            "approved": self.approved,
            "rejected": self.rejected,
            "answered": self.answered,
            # Answers are not approvals: the rate is over approve/reject decisions only.
            "approval_rate": round(self.approved / judged, 3) if judged else None,
            "median_seconds_to_decide": (
                round(statistics.median(self.seconds), 1) if self.seconds else None
            ),
            "edits": self.edits,
            "expiries": self.expiries,
            "fast_decisions": self.fast,
            "decided_without_opening": self.unopened,
            "override_rate": round(self.contradicted / self.approved, 3) if self.approved else None,
            "contradicted": self.contradicted,
            "median_seconds_high_risk": (
                round(statistics.median(self.high_risk_seconds), 1)
                if self.high_risk_seconds
                else None
            ),
            "rubber_stamping": self.rubber_stamping(),
        }

    def rubber_stamping(self) -> bool:
        judged = self.approved + self.rejected
        if len(self.high_risk_seconds) < RUBBER_STAMP_MIN_DECISIONS or not judged:
            return False
        floor = float(settings.AGENTOPS.get("RUBBER_STAMP_FLOOR_SECONDS", 10.0))
        ceiling = float(settings.AGENTOPS.get("RUBBER_STAMP_CEILING", 0.95))
        return (
            statistics.median(self.high_risk_seconds) < floor and self.approved / judged > ceiling
        )


def contradicted_approvals(since: datetime, agents: Iterable[str] | None = None) -> set[int]:
    """Ids of approve votes later contradicted: a reject in the same quorum, or evidence of a
    rule revoked because a person said such calls need a person."""
    votes = ApprovalVote.objects.filter(
        decided_at__gte=since, decision=ApprovalVote.Decision.APPROVE
    )
    if agents is not None:
        votes = votes.filter(approval__run__agent__in=list(agents))
    rejected_too = set(
        votes.filter(approval__votes__decision=ApprovalVote.Decision.REJECT).values_list(
            "pk", flat=True
        )
    )
    revoked_evidence = {
        approval_id
        for evidence in AutoApproveRule.objects.filter(
            status=AutoApproveRule.Status.REVOKED, ended_at__gte=since
        )
        .exclude(cause__startswith="revoked by")
        .values_list("evidence", flat=True)
        for approval_id in evidence or []
    }
    earned = set(votes.filter(approval_id__in=list(revoked_evidence)).values_list("pk", flat=True))
    return rejected_too | earned


def is_fast(vote: ApprovalVote, fast_seconds: float) -> bool:
    """Decided within the threshold of first opening it, or without opening it at all."""
    return vote.seconds_open is None or vote.seconds_open < fast_seconds


def approver_stats(
    *,
    since: datetime | None = None,
    fast_seconds: float | None = None,
    agents: Iterable[str] | None = None,
) -> dict:
    """The figures for decisions made since `since` (default: the last 30 days) on the calls of
    `agents` (None: every agent; approvals/oversight_reach.py says whose a person sees)."""
    since = since or timezone.now() - timedelta(days=30)
    mine = Q() if agents is None else Q(run__agent__in=list(agents))
    fast_seconds = fast_decision_seconds() if fast_seconds is None else fast_seconds
    by_user: dict[str, _Tally] = defaultdict(_Tally)
    by_tool: dict[str, _Tally] = defaultdict(_Tally)
    flagged: list[dict] = []
    votes = (
        ApprovalVote.objects.filter(decided_at__gte=since)
        .select_related("approval")
        .order_by("-decided_at")
    )
    if agents is not None:
        votes = votes.filter(approval__run__agent__in=list(agents))
    contradicted = contradicted_approvals(since, agents)
    for vote in votes.iterator():
        tool = vote.approval.tool or vote.approval.kind
        by_user[vote.username].add(vote, fast_seconds)
        by_user[vote.username].contradicted += int(vote.pk in contradicted)
        by_tool[tool].add(vote, fast_seconds)
        if is_fast(vote, fast_seconds) and len(flagged) < LIST_LIMIT:
            flagged.append(
                {
                    "approval": str(vote.approval_id),
                    "run": str(vote.approval.run_id),
                    "tool": tool,
                    "risk": vote.approval.risk,
                    "by": vote.username,
                    "decision": vote.decision,
                    "seconds_open": vote.seconds_open,
                    "decided_at": vote.decided_at,
                }
            )

    expired = Approval.objects.filter(mine, status=Approval.Status.EXPIRED, decided_at__gte=since)
    for tool, kind in expired.values_list("tool", "kind"):
        by_tool[tool or kind].expiries += 1
    # An approver's expiries: approvals they opened and then let run out.
    opened_then_expired = ApprovalView.objects.filter(approval__in=expired).values_list(
        "user__username", flat=True
    )
    for username in opened_then_expired:
        by_user[username].expiries += 1

    sampled = (
        Approval.objects.filter(mine, sampled=True, requested_at__gte=since)
        .select_related("decided_by")
        .order_by("-requested_at")[:LIST_LIMIT]
    )
    return {
        "since": since,
        "fast_decision_seconds": fast_seconds,
        "approvers": [{"approver": name, **t.as_dict()} for name, t in sorted(by_user.items())],
        "tools": [{"tool": name, **t.as_dict()} for name, t in sorted(by_tool.items())],
        "fast_decisions": flagged,
        "sampled": [
            {
                "approval": str(a.pk),
                "run": str(a.run_id),
                "tool": a.tool,
                "args": a.args,
                "explanation": a.explanation,
                "status": a.status,
                "decided_by": a.decided_by.get_username() if a.decided_by else None,
                "requested_at": a.requested_at,
                "decided_at": a.decided_at,
            }
            for a in sampled
        ],
    }


def time_to_decision_chart(*, now: datetime | None = None, days: int = 7) -> charts.Chart:
    """How long people took to decide, over the last `days`: one bar per DECISION_BUCKETS
    range, counted in one query. Decisions by nobody (expiries) are left out."""
    now = now or timezone.now()
    since = now - timedelta(days=days)
    decided = (
        Approval.objects.filter(decided_at__gte=since, decided_by__isnull=False)
        .annotate(took=F("decided_at") - F("requested_at"))
        .aggregate(
            **{
                label: Count("pk", filter=Q(took__gte=lo, took__lt=hi))
                for label, lo, hi in DECISION_BUCKETS
            }
        )
    )
    return charts.bars(
        [(label, decided[label]) for label, _, _ in DECISION_BUCKETS],
        unit="decisions",
        title=f"Time to decision, {days} days",
        every_label=True,
    )
