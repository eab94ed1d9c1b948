"""Postgres's monthly partitions of runs_step and runs_checkpoint (runs/migrations/0028).

`agentops_timeline_partition(table, month)`, made by the migration, makes one month's partition
with its TRUNCATE trigger (the row triggers come from the parent); it is SECURITY DEFINER, so
the application's role, which owns no table, can call it from the periodic task. On SQLite
nothing is partitioned and every function here does nothing.
"""

from datetime import UTC, date, datetime

from django.conf import settings
from django.db import connection

TABLES = ("runs_step", "runs_checkpoint")


def partitioned() -> bool:
    return connection.vendor == "postgresql"


def month_of(when: datetime) -> date:
    """The first day of `when`'s UTC month: the partition a run's timeline lives in."""
    return when.astimezone(UTC).date().replace(day=1)


def _add_months(month: date, count: int) -> date:
    index = month.year * 12 + month.month - 1 + count
    return date(index // 12, index % 12 + 1, 1)


def name(table: str, month: date) -> str:
    return f"{table}_p{month:%Y_%m}"


def ensure(month: date) -> None:
    """The partitions of `month` (steps and checkpoints), made if missing."""
    if not partitioned():
        return
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute("SELECT agentops_timeline_partition(%s, %s)", [table, month])


def ensure_ahead(*, now: datetime, months: int | None = None) -> list[date]:
    """This month's partitions and the next `months` months' (TIMELINE_PARTITIONS_AHEAD):
    a run is never created in a month that has none (it would land in the default one)."""
    if months is None:
        months = settings.AGENTOPS["TIMELINE_PARTITIONS_AHEAD"]
    first = month_of(now)
    made = [_add_months(first, i) for i in range(months + 1)]
    for month in made:
        ensure(month)
    return made


def sizes() -> list[tuple[str, int, int]]:
    """Each partition of the timeline: (name, rows estimated by the planner, bytes with its
    indexes and TOAST)."""
    if not partitioned():
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, greatest(c.reltuples, 0)::bigint, pg_total_relation_size(c.oid) "
            "FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent IN ('runs_step'::regclass, 'runs_checkpoint'::regclass) "
            "ORDER BY c.relname"
        )
        return [(n, int(rows), int(size)) for n, rows, size in cursor.fetchall()]


def exists(table: str, month: date) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name(table, month)])
        return bool(cursor.fetchone()[0])
