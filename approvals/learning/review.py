"""Post-hoc review: calls that ran without a person, sampled for a reviewer afterwards.
Why and how: docs/design/modules.md."""

import hashlib
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count, Exists, OuterRef, Q
from django.utils import timezone

from agentkit.tools import REGISTRY, get_tool
from runs.models import Step

from . import rules as learning
from .models import AutoApproveRule, GateOverride, PostHocReview, RuleHit
from .tell_admins import tell_admins_on_commit

LOOK_BACK = timedelta(days=7)
# Tool steps of the window looked at per refresh, newest first: a bound on the page's work,
# far above what the daily samples need (it used to be 2 000, which let a busy agent crowd
# the others out of the sample).
SCAN_LIMIT = 50_000


class ReviewError(Exception):
    """The verdict cannot be recorded (a clear message for the page)."""


def rank(step_pk: int) -> float:
    """Where the step falls in the seeded draw, in [0, 1): a day's sample is its lowest."""
    seed = settings.AGENTOPS.get("GATE_SAMPLING_SEED") or settings.SECRET_KEY
    digest = hashlib.sha256(f"{seed}:posthoc:{step_pk}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def per_day(gates: dict | None) -> int:
    """How many calls a day the agent's gate rules (a run's snapshot) have sampled."""
    value = (gates or {}).get("review_per_day")
    if value is None:
        value = settings.AGENTOPS["REVIEW_SAMPLE_PER_DAY"]
    return max(0, int(value))


def refresh_queue(now=None) -> int:
    """Fill each agent's daily sample of ungated calls of the last LOOK_BACK; how many were
    added. Four queries whatever the number of agents, then one insert per call added."""
    now = now or timezone.now()
    since = now - LOOK_BACK
    queued = Counter(
        (agent, created.date())
        for agent, created in PostHocReview.objects.filter(step__created_at__gte=since).values_list(
            "agent", "step__created_at"
        )
    )
    # Calls of the registry's read-only tools are never reviewable: left in the database.
    # (A tool only a resolver knows, an MCP server's, is judged below once it is found.)
    read_only = sorted(name for name, tool in REGISTRY.items() if not tool.has_side_effects)
    steps = (
        Step.objects.filter(kind=Step.Kind.TOOL, created_at__gte=since)
        .exclude(data__tool__in=read_only)
        .exclude(Exists(PostHocReview.objects.filter(step=OuterRef("pk"))))
        .order_by("-created_at")
        .values_list(
            "pk",
            "run_id",
            "run__agent",
            "created_at",
            "data__tool",
            "data__is_error",
            "data__approval",
            "run__agent_config__gates__review_per_day",
        )[:SCAN_LIMIT]
    )
    days: dict[tuple, list] = defaultdict(list)
    quota: dict[str, int] = {}
    tools: dict[str, object] = {}
    for pk, run_id, agent, created, name, is_error, approval, agents_per_day in steps:
        # The newest run's snapshot says how many a day this agent has sampled.
        quota.setdefault(agent, per_day({"review_per_day": agents_per_day}))
        if is_error or not quota[agent]:
            continue
        if name not in tools:
            tools[name] = get_tool(str(name or ""))
        tool = tools[name]
        if tool is None or not tool.has_side_effects:
            continue
        days[(agent, created.date())].append((rank(pk), pk, run_id, tool.name, approval))
    # Which approved calls a rule (not a person) approved.
    approvals = [c[4] for calls in days.values() for c in calls if c[4]]
    by_rule = dict(
        RuleHit.objects.filter(checked=False, approval_id__in=approvals).values_list(
            "approval_id", "rule_id"
        )
    )
    by_rule = {str(a): r for a, r in by_rule.items()}
    chosen = []
    for (agent, day), calls in days.items():
        left = quota[agent] - queued[(agent, day)]
        for _, pk, run_id, tool, approval in sorted(calls):
            if left <= 0:
                break
            rule_id = by_rule.get(str(approval)) if approval else None
            if approval and rule_id is None:
                continue  # a person approved it: not an ungated call
            chosen.append((pk, run_id, agent, tool, rule_id))
            left -= 1
    args = dict(Step.objects.filter(pk__in=[c[0] for c in chosen]).values_list("pk", "data__args"))
    added = 0
    for pk, run_id, agent, tool, rule_id in chosen:
        try:
            with transaction.atomic():
                PostHocReview.objects.create(
                    run_id=run_id,
                    step_id=pk,
                    agent=agent,
                    tool=tool,
                    args=args.get(pk) or {},
                    rule_id=rule_id,
                    sampled_at=now,
                )
        except IntegrityError:
            continue  # another request sampled it first
        added += 1
    return added


@dataclass(frozen=True)
class OverrideRate:
    agent: str
    reviewed: int  # calls a reviewer gave a verdict on
    overridden: int  # of which "should have been gated"
    pending: int

    @property
    def rate(self) -> float | None:
        """The share of reviewed calls the reviewer said were wrong (None: none reviewed)."""
        return self.overridden / self.reviewed if self.reviewed else None


def override_rates(reviews, since) -> list[OverrideRate]:
    """Per agent, of the `reviews` (a queryset: the viewer's) sampled since `since`: how many
    were reviewed, how many of those should have been gated, and how many wait. One query."""
    wrong = PostHocReview.Verdict.SHOULD_HAVE_BEEN_GATED
    pending = PostHocReview.Verdict.PENDING
    rows = (
        reviews.filter(sampled_at__gte=since)
        .order_by()
        .values("agent")
        .annotate(
            reviewed=Count("pk", filter=~Q(verdict=pending)),
            overridden=Count("pk", filter=Q(verdict=wrong)),
            waiting=Count("pk", filter=Q(verdict=pending)),
        )
        .order_by("agent")
    )
    return [OverrideRate(r["agent"], r["reviewed"], r["overridden"], r["waiting"]) for r in rows]


def record_verdict(review_pk: int, *, user, verdict: str, reason: str) -> PostHocReview:
    reason = (reason or "").strip()
    if not (user.is_authenticated and user.can_approve):
        raise ReviewError("only approvers and admins review calls")
    if verdict not in (PostHocReview.Verdict.FINE, PostHocReview.Verdict.SHOULD_HAVE_BEEN_GATED):
        raise ReviewError("the verdict is fine or should_have_been_gated")
    if verdict == PostHocReview.Verdict.SHOULD_HAVE_BEEN_GATED and not reason:
        raise ReviewError("say why it should have been gated")
    with transaction.atomic():
        review = PostHocReview.objects.select_for_update().get(pk=review_pk)
        if review.verdict != PostHocReview.Verdict.PENDING:
            raise ReviewError(f"already reviewed: {review.get_verdict_display()}")
        now = timezone.now()
        PostHocReview.objects.filter(pk=review.pk).update(
            verdict=verdict, reason=reason, reviewer=user, reviewed_at=now
        )
        review.verdict, review.reason, review.reviewer, review.reviewed_at = (
            verdict,
            reason,
            user,
            now,
        )
        if review.is_incident:
            _incident(review, user)
    return review


def _incident(review: PostHocReview, user) -> None:
    who = user.get_username()
    cause = f"{who} found a {review.tool} call it covers should have been gated: {review.reason}"
    rules = AutoApproveRule.objects.select_for_update().filter(
        agent=review.agent, tool=review.tool, status=AutoApproveRule.Status.ACTIVE
    )
    for rule in rules:
        if rule.pk == review.rule_id or learning.matches(rule.pattern, review.args):
            learning.revoke(rule, cause=cause, by=user)
    if not GateOverride.objects.filter(
        agent=review.agent, tool=review.tool, cleared_at__isnull=True
    ).exists():
        GateOverride.objects.create(agent=review.agent, tool=review.tool, review=review)
    tell_admins_on_commit(
        f"Incident: a {review.tool} call of {review.agent} should have been gated",
        f"Reviewer {who}: {review.reason}\nRun {review.run_id}, step {review.step_id}. "
        f"Every {review.tool} call of {review.agent} now goes to a person until an admin "
        "clears the override on the rules page.",
    )


def clear_override(override: GateOverride, *, by) -> bool:
    return bool(
        GateOverride.objects.filter(pk=override.pk, cleared_at__isnull=True).update(
            cleared_at=timezone.now(), cleared_by=by
        )
    )


def incidents(days: int = 7):
    return (
        PostHocReview.objects.filter(
            verdict=PostHocReview.Verdict.SHOULD_HAVE_BEEN_GATED,
            reviewed_at__gte=timezone.now() - timedelta(days=days),
        )
        .select_related("reviewer")
        .order_by("-reviewed_at")
    )
