"""Small filters the run pages share."""

from datetime import datetime

from django import template
from django.utils import timezone

from runs.models import Compensation

register = template.Library()


@register.filter
def ago(moment: datetime | None, now: datetime | None = None) -> str:
    """A past moment as people say it: "just now", "2 min ago", "3 h ago", "yesterday",
    "5 days ago"; older than a month, the date. Exact times go in the element's title."""
    if moment is None:
        return ""
    seconds = ((now or timezone.now()) - moment).total_seconds()
    if seconds < 45:
        return "just now"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min ago"
    hours = round(seconds / 3600)
    if hours < 24:
        return f"{hours} h ago"
    days = round(seconds / 86400)
    if days == 1:
        return "yesterday"
    if days < 31:
        return f"{days} days ago"
    return f"{moment:%Y-%m-%d}"


@register.simple_tag
def compensations_by_run(runs) -> dict[str, list[tuple[str, str]]]:
    """The compensations asked in each of these runs (one query for the page): run id ->
    [(compensating tool, the newest request's status)], one per effect."""
    rows = (
        Compensation.objects.filter(run_id__in=[run.pk for run in runs])
        .order_by("effect_id", "created_at", "id")
        .values_list("run_id", "effect_id", "tool", "status")
    )
    newest: dict[tuple[str, int], tuple[str, str]] = {}
    for run_id, effect_id, tool, status in rows:
        newest[(str(run_id), effect_id)] = (tool, status)
    out: dict[str, list[tuple[str, str]]] = {}
    for (key, _), shown in newest.items():
        out.setdefault(key, []).append(shown)
    return out
