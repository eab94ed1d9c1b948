"""Pages of the learning gate policy: the auto-approve rules (with their evidence, hits and
history; admins accept, decline or revoke), and the post-hoc review queue (approvers mark an
ungated call fine or "should have been gated"; admins clear the overrides that leaves)."""

from datetime import timedelta

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from accounts import teams
from accounts.requests import SignedInRequest

from .. import oversight_reach
from . import review, stats
from . import rules as learning
from .models import AutoApproveRule, GateOverride, PostHocReview

MAX_EXPIRY_DAYS = 365
RATE_DAYS = 30  # the review page's override rates cover the calls sampled in this window
MAX_HITS = 1_000_000


@require_GET
@login_required
def rules(request: SignedInRequest) -> HttpResponse:
    visible = _visible(request)
    rows = []
    for rule in AutoApproveRule.objects.filter(visible).prefetch_related("events", "events__by"):
        expiry, max_hits = learning.default_scope(rule)
        rows.append(
            {
                "rule": rule,
                "described": learning.describe(rule.tool, rule.pattern),
                "evidence": learning.evidence_calls(rule),
                "events": list(rule.events.all()),
                "default_days": max(1, int(expiry.total_seconds() // 86400)),
                "default_max_hits": max_hits,
                "in_scope": learning.in_scope(rule),
            }
        )
    overrides = GateOverride.objects.filter(visible, cleared_at__isnull=True).select_related(
        "review"
    )
    return render(
        request,
        "approvals/rules.html",
        {"rows": rows, "overrides": overrides, "switched_on": learning.switched_on()},
    )


def _admin_rule(request: HttpRequest, pk: int) -> AutoApproveRule:
    """Global admins, and the members of a team owning the rule's agent who administer it."""
    agents = _administered(request)
    return get_object_or_404(AutoApproveRule.objects.select_for_update().filter(agents), pk=pk)


def _administered(request: HttpRequest):
    """The condition on `agent` for what this user administers (403 if nothing)."""
    agents = teams.scope(request.user, teams.Power.ADMINISTER)
    if agents.nothing:
        raise PermissionDenied
    return agents.q("agent")


def _visible(request: SignedInRequest):
    """The condition on `agent` for what this user sees (403 with no role)."""
    if not request.user.can_view:
        raise PermissionDenied
    return teams.scope(request.user, teams.Power.VIEW).q("agent")


def _bounded_int(value: str, low: int, high: int) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if low <= number <= high else None


@require_POST
@login_required
def accept_rule(request: HttpRequest, pk: int) -> HttpResponse:
    days = _bounded_int(request.POST.get("expires_in_days", ""), 1, MAX_EXPIRY_DAYS)
    max_hits = _bounded_int(request.POST.get("max_hits", ""), 1, MAX_HITS)
    with transaction.atomic():
        rule = _admin_rule(request, pk)
        if days is None or max_hits is None:
            messages.error(
                request,
                f"Rule #{rule.pk}: give an expiry of 1 to {MAX_EXPIRY_DAYS} days and a cap "
                f"of 1 to {MAX_HITS} calls.",
            )
            return redirect("approvals:rules")
        try:
            learning.accept(
                rule,
                by=request.user,
                expires_at=timezone.now() + timedelta(days=days),
                max_hits=max_hits,
            )
        except learning.RuleError as exc:
            messages.error(request, f"Rule #{rule.pk}: {exc}")
        else:
            messages.success(request, f"Rule #{rule.pk} is active.")
    return redirect("approvals:rules")


@require_POST
@login_required
def decline_rule(request: HttpRequest, pk: int) -> HttpResponse:
    with transaction.atomic():
        rule = _admin_rule(request, pk)
        try:
            learning.decline(
                rule, by=request.user, cause=request.POST.get("reason", "").strip()[:1000]
            )
        except learning.RuleError as exc:
            messages.error(request, f"Rule #{rule.pk}: {exc}")
        else:
            messages.success(request, f"Rule #{rule.pk} declined.")
    return redirect("approvals:rules")


@require_POST
@login_required
def revoke_rule(request: HttpRequest, pk: int) -> HttpResponse:
    reason = request.POST.get("reason", "").strip()[:1000]
    with transaction.atomic():
        rule = _admin_rule(request, pk)
        if not reason:
            messages.error(request, f"Rule #{rule.pk}: say why it is revoked.")
        elif learning.revoke(
            rule, by=request.user, cause=f"revoked by {request.user.get_username()}: {reason}"
        ):
            messages.success(request, f"Rule #{rule.pk} revoked.")
        else:
            messages.error(request, f"Rule #{rule.pk} is {rule.status}, not active.")
    return redirect("approvals:rules")


@require_POST
@login_required
def clear_override(request: HttpRequest, pk: int) -> HttpResponse:
    override = get_object_or_404(GateOverride.objects.filter(_administered(request)), pk=pk)
    if review.clear_override(override, by=request.user):
        messages.success(request, f"{override.tool} of {override.agent}: the policy decides again.")
    return redirect("approvals:rules")


# --- post-hoc review -----------------------------------------------------------------------------
@require_GET
@login_required
def review_queue(request: SignedInRequest) -> HttpResponse:
    visible = PostHocReview.objects.filter(_visible(request))
    review.refresh_queue()
    pending = visible.filter(verdict=PostHocReview.Verdict.PENDING)
    done = visible.exclude(verdict=PostHocReview.Verdict.PENDING).select_related("reviewer")
    since = timezone.now() - timedelta(days=RATE_DAYS)
    return render(
        request,
        "approvals/review.html",
        {
            "pending": pending.select_related("rule", "step")[:200],
            "done": done[:50],
            "rates": review.override_rates(visible, since),
            "rate_days": RATE_DAYS,
            "per_day": settings.AGENTOPS["REVIEW_SAMPLE_PER_DAY"],
        },
    )


@require_POST
@login_required
def review_call(request: SignedInRequest, pk: int) -> HttpResponse:
    if not request.user.can_approve:
        raise PermissionDenied
    call = get_object_or_404(PostHocReview.objects.filter(_visible(request)), pk=pk)
    # Reviewing a call is deciding about it after the fact: the teams' decide power.
    if not teams.may(request.user, teams.Power.DECIDE, call.agent):
        raise PermissionDenied
    try:
        done = review.record_verdict(
            pk,
            user=request.user,
            verdict=request.POST.get("verdict", ""),
            reason=request.POST.get("reason", "")[:2000],
        )
    except review.ReviewError as exc:
        messages.error(request, f"Review #{pk}: {exc}")
    else:
        messages.success(request, f"Review #{pk}: {done.get_verdict_display()}.")
    return redirect("approvals:review")


# --- approver statistics -----------------------------------------------------------------------
@require_GET
@login_required
def approver_stats(request: HttpRequest) -> HttpResponse:
    """Every agent's figures for admins (or one team's), their teams' agents' for a team's
    administrators (approvals/oversight_reach.py)."""
    user = request.user
    if not oversight_reach.may_oversee(user):
        raise PermissionDenied
    try:
        days = min(max(int(request.GET.get("days", 30)), 1), 365)
    except ValueError:
        days = 30
    team = request.GET.get("team", "").strip()
    context = {"days": days, "team": team, "teams": oversight_reach.team_slugs(user)}
    try:
        agents = oversight_reach.agents_for(user, team=team)
    except oversight_reach.OutOfReach as exc:
        return render(request, "approvals/stats.html", {**context, "error": str(exc)}, status=400)
    figures = stats.approver_stats(since=timezone.now() - timedelta(days=days), agents=agents)
    return render(request, "approvals/stats.html", {**context, "stats": figures})
