"""Post-hoc review: calls that ran without a person, sampled for a reviewer afterwards.

Only agents that declare GateRules.learning are sampled: theirs is the policy that lowers the
bar. A call is reviewable when it had side effects and no person approved it (the policy let
it run, or an auto-approve rule did). Which calls are sampled is a function of a seed (the
GATE_SAMPLING_SEED setting, else SECRET_KEY) and the step, so the sample is stable and a
model cannot predict it.

A "should have been gated" verdict is an incident: it revokes the rule that approved the call
and any other active rule covering it, gates every call of that agent's tool until an admin
clears the override, shows on the dashboard and is e-mailed to admins.
"""

import hashlib
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from agentkit.tools import get_tool
from runs.models import Step

from . import rules as learning
from .models import AutoApproveRule, GateOverride, PostHocReview, RuleHit
from .tell_admins import tell_admins_on_commit

REVIEW_SHARE = 0.2  # of the eligible ungated calls
LOOK_BACK = timedelta(days=7)
SCAN_LIMIT = 2000  # newest tool steps looked at per refresh


class ReviewError(Exception):
    """The verdict cannot be recorded (a clear message for the page)."""


def sampled(step_pk: int, share: float = REVIEW_SHARE) -> bool:
    seed = settings.AGENTOPS.get("GATE_SAMPLING_SEED") or settings.SECRET_KEY
    digest = hashlib.sha256(f"{seed}:posthoc:{step_pk}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


def refresh_queue(now=None) -> int:
    """Add the newly sampled ungated calls to the review queue; how many were added."""
    now = now or timezone.now()
    reviewed = set(
        PostHocReview.objects.filter(sampled_at__gte=now - LOOK_BACK * 2).values_list(
            "step_id", flat=True
        )
    )
    steps = (
        Step.objects.filter(kind=Step.Kind.TOOL, created_at__gte=now - LOOK_BACK)
        .select_related("run")
        .order_by("-created_at")[:SCAN_LIMIT]
    )
    candidates = [s for s in steps if s.pk not in reviewed and sampled(s.pk)]
    approved = [s.data.get("approval") for s in candidates if isinstance(s.data, dict)]
    by_rule = {
        str(approval): rule
        for approval, rule in RuleHit.objects.filter(
            checked=False, approval_id__in=[a for a in approved if a]
        ).values_list("approval_id", "rule_id")
    }
    added = 0
    for step in candidates:
        data = step.data if isinstance(step.data, dict) else {}
        if not learning.declared(step.run.agent_config.get("gates", {})) or data.get("is_error"):
            continue
        tool = get_tool(str(data.get("tool", "")))
        if tool is None or not tool.has_side_effects:
            continue
        rule_id = None
        if data.get("approval"):
            rule_id = by_rule.get(str(data["approval"]))
            if rule_id is None:
                continue  # a person approved it: not an ungated call
        try:
            with transaction.atomic():
                PostHocReview.objects.create(
                    run=step.run,
                    step=step,
                    agent=step.run.agent,
                    tool=tool.name,
                    args=data.get("args") or {},
                    rule_id=rule_id,
                    sampled_at=now,
                )
        except IntegrityError:
            continue  # another request sampled it first
        added += 1
    return added


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
