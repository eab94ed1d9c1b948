"""Escalation: nobody decided in time, so the next tier of people is told.
Why and how: docs/design/modules.md."""

import functools
from collections.abc import Callable
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from accounts import teams
from runs.models import Run

from ..models import Approval, Escalation


def chain(run: Run) -> list[dict]:
    """The run's escalation tiers, earliest first."""
    tiers = (run.agent_config.get("gates") or {}).get("escalation") or []
    return sorted(tiers, key=lambda t: int(t.get("after_seconds") or 0))


def tier_people(tier: dict, agent: str) -> list[str]:
    """Usernames of the active people a tier names (by username or by role) whose teams
    decide for `agent` (accounts/teams.py): a tier does not reach past a team."""
    users = get_user_model().objects.filter(is_active=True)
    by_role = Q(groups__name__in=tier.get("roles") or [])
    if "admin" in (tier.get("roles") or []):
        by_role |= Q(is_superuser=True)
    found = users.filter(Q(username__in=tier.get("users") or []) | by_role).distinct()
    found = teams.members_reaching(found, teams.Power.DECIDE, agent)
    return sorted(set(found.values_list("username", flat=True)))


def escalate_due(
    on_notified: Callable[[str, int], None], now: datetime | None = None, *, batch: int = 500
) -> int:
    """Record every tier that is due and not notified yet, and call `on_notified(approval id,
    tier)` after each commits (tasks.approval_escalated queues the e-mail); returns how many."""
    now = now or timezone.now()
    pending = (
        Approval.objects.pending()
        .filter(expires_at__gt=now, run__status__in=Run.ACTIVE_STATUSES)
        .select_related("run")
        .order_by("requested_at")[:batch]
    )
    notified = 0
    for approval in pending:
        tiers = chain(approval.run)
        if not tiers:
            continue
        done = set(approval.escalations.values_list("tier", flat=True))
        for number, tier in enumerate(tiers, start=1):
            due = approval.requested_at + timedelta(seconds=int(tier.get("after_seconds") or 0))
            if number in done or due > now:
                continue
            try:
                with transaction.atomic():
                    people = tier_people(tier, approval.run.agent)
                    Escalation.objects.create(
                        approval=approval, tier=number, notified=people, at=now
                    )
                    transaction.on_commit(functools.partial(on_notified, str(approval.pk), number))
            except IntegrityError:
                continue  # another sweep notified this tier first
            notified += 1
    return notified
