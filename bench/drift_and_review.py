r"""What the drift flags (runs/drift.py) and the post-hoc review refresh
(approvals/learning/review.py) cost on a large timeline: both run when a page is opened.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentops_bench \
        uv run python bench/seed_runs.py --runs 50000 --steps-per-run 10
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentops_bench \
        uv run python bench/drift_and_review.py --repeat 10

Prints p50/p95 per call and the SQL queries per call. The seeded tool steps are read-only
calls (lookup_order), so the review refresh scans its week of tool steps and adds nothing:
the scan is what is timed.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")

import django

django.setup()

from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from approvals.learning import review  # noqa: E402
from bench.common import machine, percentile  # noqa: E402
from runs import drift  # noqa: E402
from runs.models import Run, Step  # noqa: E402


def timed(label: str, call, repeat: int) -> None:
    walls, queries, value = [], 0, None
    for _ in range(repeat):
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            value = call()
            walls.append((time.perf_counter() - started) * 1000)
        queries = len(captured)
    shown = len(value) if isinstance(value, list) else value
    print(
        f"{label:<40} p50 {statistics.median(walls):8.1f} ms  p95 "
        f"{percentile(walls, 95):8.1f} ms  {queries} queries  -> {shown}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    print(machine())
    print(f"{Run.objects.count()} runs, {Step.objects.count()} steps")
    timed("drift flags, every agent", lambda: drift.flags(Run.objects.all()), args.repeat)
    timed(
        "drift flags, one agent",
        lambda: drift.flags(Run.objects.filter(agent="sql-analyst")),
        args.repeat,
    )
    timed("post-hoc review refresh", review.refresh_queue, args.repeat)
    # As if no registered tool were read-only: every tool step of the week (up to the scan
    # limit) is read and judged, the most the refresh does.
    registry, review.REGISTRY = review.REGISTRY, {}
    try:
        timed("post-hoc review refresh, every call read", review.refresh_queue, args.repeat)
    finally:
        review.REGISTRY = registry


if __name__ == "__main__":
    main()
