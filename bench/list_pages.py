r"""Server time and query count of the list pages on a large database.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentops_bench \
        uv run python bench/seed_runs.py --runs 100000 --steps-per-run 10
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentops_bench \
        uv run python bench/list_pages.py --repeat 30

Requests go through Django's full stack in-process (middleware, views, templates, ORM) with
the test client, so the figure is server time without network. Prints p50/p95 per page and
the number of SQL queries the page made, and the machine's load average before and after
(other work on the machine shows in the figures).
"""

import argparse
import logging
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")

import django

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.contrib.auth.models import Group  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from runs.models import Run  # noqa: E402


def pages() -> list[str]:
    some_run = Run.objects.order_by("-created_at").values_list("pk", flat=True)[500]
    return [
        "/",
        "/runs/",
        "/runs/?status=failed",
        "/runs/?agent=refund-desk&trigger=api",
        "/runs/?q=bench+run+4242",
        "/runs/?page=200",
        f"/runs/{some_run}/",
        "/approvals/",
        "/audit/",
        "/api/runs",
        "/api/runs?status=failed&limit=50",
        f"/api/runs/{some_run}/steps",
    ]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    logging.getLogger("django.request").setLevel(logging.CRITICAL)  # 404s are reported below
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=30, help="timed requests per page")
    args = parser.parse_args()

    user, _ = get_user_model().objects.get_or_create(username="bench-admin")
    user.groups.add(Group.objects.get(name="admin"))
    # A host production settings allow (the test client says "testserver" otherwise).
    client = Client(SERVER_NAME="127.0.0.1")
    client.force_login(user)
    print(f"{Run.objects.count()} runs in the database; load average {_load()}")
    print(f"{'page':<48} {'status':>6} {'p50 ms':>8} {'p95 ms':>8} {'queries':>8}")
    for url in pages():
        times = []
        queries = 0
        status = 0
        for i in range(args.repeat + 2):
            with CaptureQueriesContext(connection) as ctx:
                started = time.perf_counter()
                response = client.get(url)
                if hasattr(response, "streaming_content"):
                    b"".join(response.streaming_content)
                elapsed = time.perf_counter() - started
            status = response.status_code
            if i >= 2:  # the first two warm caches and connections
                times.append(elapsed * 1000)
                queries = len(ctx.captured_queries)
        print(
            f"{url[:48]:<48} {status:>6} {statistics.median(times):>8.1f} "
            f"{percentile(times, 0.95):>8.1f} {queries:>8}"
        )
    print(f"load average {_load()} ({os.cpu_count()} CPUs)")


def _load() -> str:
    return " ".join(f"{n:.2f}" for n in os.getloadavg())


if __name__ == "__main__":
    main()
