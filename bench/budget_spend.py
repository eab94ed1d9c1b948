r"""What reading a budget's spend costs on a large timeline (runs/budgets/models.py `spent`).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentops_bench \
        uv run python bench/seed_runs.py --runs 50000 --steps-per-run 10
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentops_bench \
        uv run python bench/budget_spend.py --repeat 50

For the current month in UTC (day rows only), in Europe/Paris (its first hour, before the
first UTC midnight, summed from the steps: first read, then cached), for the current day in a
time zone whose day began after UTC midnight (steps only, every time: the case the cache cannot
help), and the whole-timeline sum it replaces. Prints p50/p95 per read, the SQL queries per
read, and the plan of the steps query. The agent read is sql-analyst (half the seeded steps).
"""

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")

import django

django.setup()

from django.core.cache import cache  # noqa: E402
from django.db import connection  # noqa: E402
from django.db.models import Sum  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402

from bench.common import machine, percentile  # noqa: E402
from runs.budgets import models as budgets  # noqa: E402
from runs.models import Step  # noqa: E402

AGENT = "sql-analyst"


def timed(label: str, read, repeat: int, *, clear_cache: bool = False) -> None:
    walls, queries = [], 0
    for _ in range(repeat):
        if clear_cache:
            cache.clear()
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            value = read()
            walls.append((time.perf_counter() - started) * 1000)
        queries = len(captured)
    print(
        f"{label:<58} p50 {statistics.median(walls):7.2f} ms  p95 "
        f"{percentile(walls, 95):7.2f} ms  {queries} queries  = {value}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    print(machine())
    steps = Step.objects.count()
    print(f"{steps} steps on {connection.vendor}")
    now = timezone.now()
    month_utc, _ = budgets.period_bounds("month", "UTC", now)
    month_paris, _ = budgets.period_bounds("month", "Europe/Paris", now)
    # A day that began after today's UTC midnight (in a zone west of UTC, most of the day).
    midnight = datetime.combine(now.date(), datetime.min.time(), UTC)
    zone = next(
        (
            z
            for z in ("America/New_York", "America/Los_Angeles", "Pacific/Honolulu")
            if budgets.period_bounds("day", z, now)[0] >= midnight
        ),
        "America/New_York",
    )
    day_west, _ = budgets.period_bounds("day", zone, now)
    as_of = now
    repeat = args.repeat
    timed("month, UTC (day rows)", lambda: budgets.spent(AGENT, month_utc, as_of), repeat)
    timed(
        "month, Europe/Paris, first read (steps of the first hour)",
        lambda: budgets.spent(AGENT, month_paris, as_of),
        repeat,
        clear_cache=True,
    )
    timed(
        "month, Europe/Paris, cached",
        lambda: budgets.spent(AGENT, month_paris, as_of),
        repeat,
    )
    timed(
        f"day, {zone} (began {day_west:%H:%M} UTC: steps, every read)",
        lambda: budgets.spent(AGENT, day_west, now),
        repeat,
    )
    timed(
        "what it replaces: the month's steps summed (UTC)",
        lambda: Step.objects.filter(
            created_at__gte=month_utc, created_at__lt=as_of, cost_usd__gt=0, run__agent=AGENT
        ).aggregate(c=Sum("cost_usd"))["c"],
        max(3, repeat // 10),
    )
    if connection.vendor == "postgresql":
        edge_end = datetime.combine(month_paris.date(), datetime.min.time(), UTC) + timedelta(
            days=1
        )
        query = Step.objects.filter(
            created_at__gte=month_paris, created_at__lt=edge_end, cost_usd__gt=0, run__agent=AGENT
        ).values("cost_usd")
        print("plan of the first hour's steps:")
        print("  " + query.explain().replace("\n", "\n  "))


if __name__ == "__main__":
    main()
