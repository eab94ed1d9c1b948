"""How long a run's timeline stays in the database: its agent's Retention, else the longest
of its agent's teams' (a team keeps what it keeps), else TIMELINE_RETENTION_DAYS (0: for
ever). Only finished runs are ever due; their age is counted from their creation (the
partition key), so a month's partition empties as one."""

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Max, QuerySet

from accounts.models import TeamAgent

from ..models import ArchivedRun, Retention, Run


def keep_days(agent: str) -> int | None:
    """Days `agent`'s finished runs keep their timelines here; None: for ever."""
    own = Retention.objects.filter(agent=agent, team__isnull=True).first()
    if own is not None:
        return own.keep_days
    teams = TeamAgent.objects.filter(agent=agent).values("team")
    longest = Retention.objects.filter(team__in=teams).aggregate(days=Max("keep_days"))["days"]
    if longest is not None:
        return longest
    return settings.AGENTOPS["TIMELINE_RETENTION_DAYS"] or None


def due(*, now: datetime, older_than_days: int | None = None) -> QuerySet[Run]:
    """Finished runs past their retention whose timeline is still here. `older_than_days`
    overrides every policy (the command's --older-than-days)."""
    finished = Run.objects.exclude(status__in=Run.ACTIVE_STATUSES).exclude(
        pk__in=ArchivedRun.objects.values("run")
    )
    if older_than_days is not None:
        return finished.filter(created_at__lt=now - timedelta(days=older_than_days))
    agents = finished.values_list("agent", flat=True).distinct().order_by()
    chosen = Run.objects.none()
    for agent in agents:
        days = keep_days(agent)
        if days is not None:
            chosen |= finished.filter(agent=agent, created_at__lt=now - timedelta(days=days))
    return chosen
