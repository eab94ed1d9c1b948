r"""Server time, CPU and query count of the list pages on a large database.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentops_bench \
        uv run python bench/seed_runs.py --runs 100000 --steps-per-run 10
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentops_bench \
        uv run python bench/list_pages.py --pending 1000 --decided 5000 --repeat 30

Works on a fresh clone: it migrates, and with DEBUG=false (the default here, as production
runs) it runs `collectstatic` first, which the manifest storage needs to render a page.

Seeds approvals first, if the database has fewer than asked: --pending approvals on waiting
runs (riskiest first is what the queue sorts by, so the risks vary) and --decided ones on
finished runs, with bulk_create (no notifications). Then times the dashboard (spend per agent
and day, read from runs.models.AgentDaySpend), the runs list and its filters, search for a
word every seeded run has ("bench") on the runs list and the audit list, the audit list, the
approvals queue (pages of 50) and its 10th page, and the JSON API.

Requests go through Django's full stack in-process (middleware, views, templates, ORM) with
the test client, as HTTPS (the header production's proxy sets), so the figure is server time
without network. Any status but 200 stops the bench with the page and the status (a 301 or a
500 timed as if it were the page would be a lie). Prints p50/p95 wall and p50 CPU per page,
the HTML size and the number of SQL queries, and the load average and this process's CPU
time before and after (other work on the machine shows in the wall times, less in the CPU).
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
os.environ.setdefault("DEBUG", "false")
os.environ.setdefault("SECRET_KEY", "bench-only-not-a-secret")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.contrib.auth.models import Group  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402

from approvals import listing  # noqa: E402
from approvals.models import Approval  # noqa: E402
from bench.common import machine, percentile  # noqa: E402
from runs.models import Run  # noqa: E402
from runs.paging import Cursor  # noqa: E402

RISKS = [Approval.Risk.LOW, Approval.Risk.MEDIUM, Approval.Risk.HIGH, Approval.Risk.CRITICAL]
DECIDED = [Approval.Status.APPROVED, Approval.Status.REJECTED, Approval.Status.EXPIRED]


def seed_approvals(pending: int, decided: int) -> None:
    """Top up to `pending` pending and `decided` decided approvals."""
    now = timezone.now()

    def make(run_ids, status) -> list[Approval]:
        return [
            Approval(
                run_id=run_id,
                gate_seq=2,
                llm_seq=1,
                tool_use_id=f"toolu_bench_{i}",
                tool="issue_refund",
                args={"order_id": i, "amount": f"{10 + i % 90}.00", "reason": "bench"},
                explanation=f"Refund of {10 + i % 90}.00 is above the auto-approve limit.",
                risk=RISKS[i % len(RISKS)],
                context_summary=f"order {i} · bench approval {i}",
                status=status if status == Approval.Status.PENDING else DECIDED[i % 3],
                requested_at=now - timezone.timedelta(minutes=i),
                expires_at=now + timezone.timedelta(days=7),
                decided_at=None if status == Approval.Status.PENDING else now,
            )
            for i, run_id in enumerate(run_ids)
        ]

    have = Approval.objects.filter(status=Approval.Status.PENDING).count()
    if have < pending:
        # Pending approvals belong to waiting runs (the queue joins the run); a run waits on
        # one approval here, so runs that already have one are skipped.
        free = Run.objects.filter(status=Run.Status.WAITING).exclude(approvals__isnull=False)
        ids = list(free.values_list("pk", flat=True)[: pending - have])
        if len(ids) < pending - have:
            sys.exit(
                f"only {len(ids)} waiting runs without an approval for {pending - have} more "
                "pending approvals: seed more runs (bench/seed_runs.py, 1 % of them wait)"
            )
        Approval.objects.bulk_create(make(ids, Approval.Status.PENDING), batch_size=1000)
    have = Approval.objects.exclude(status=Approval.Status.PENDING).count()
    if have < decided:
        done = Run.objects.filter(status=Run.Status.SUCCEEDED).exclude(approvals__isnull=False)
        ids = list(done.values_list("pk", flat=True)[: decided - have])
        Approval.objects.bulk_create(make(ids, "decided"), batch_size=1000)
    with connection.cursor() as cur:
        # What autovacuum does soon after a bulk load: without statistics the planner takes
        # 1 000 pending rows for 8.
        cur.execute("VACUUM ANALYZE approvals_approval")
    print(
        f"approvals: {Approval.objects.filter(status=Approval.Status.PENDING).count()} pending, "
        f"{Approval.objects.exclude(status=Approval.Status.PENDING).count()} decided"
    )


def pages() -> list[str]:
    recent = Run.objects.order_by("-created_at", "-id")
    some_run = recent.values_list("pk", flat=True)[min(500, recent.count() - 1)]
    # The 200th page of 50 (keyset paging: the page after the run before it).
    deep = Cursor.of(recent.only("pk", "created_at")[min(9_949, recent.count() - 1)]).token
    # The queue's 10th page of 50: the page after its 450th approval.
    pending = listing.in_queue_order(Approval.objects.pending())
    deep_queue = listing.Cursor.of(pending[min(449, max(0, pending.count() - 1))]).token
    return [
        "/",
        "/runs/",
        "/runs/?status=failed",
        "/runs/?agent=refund-desk&trigger=api",
        "/runs/?q=bench+run+4242",
        "/runs/?q=bench",
        f"/runs/?after={deep}",
        f"/runs/{some_run}/",
        "/approvals/",
        f"/approvals/?after={deep_queue}",
        "/audit/",
        "/audit/?q=bench",
        "/api/runs",
        "/api/runs?status=failed&limit=50",
        f"/api/runs/{some_run}/steps",
        "/api/approvals",
    ]


def main() -> None:
    logging.getLogger("django.request").setLevel(logging.CRITICAL)  # errors stop the bench below
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=30, help="timed requests per page")
    parser.add_argument("--pending", type=int, default=1000, help="pending approvals to seed")
    parser.add_argument("--decided", type=int, default=5000, help="decided approvals to seed")
    args = parser.parse_args()
    if not settings.IS_POSTGRES:
        sys.exit("point DATABASE_URL at Postgres (see the docstring)")
    print(f"before: {machine()}", flush=True)
    call_command("migrate", interactive=False, verbosity=0)
    if not settings.DEBUG:
        # The manifest storage answers 500 for a page whose static files were never
        # collected: what a fresh clone has. `manage.py up` does the same at start.
        call_command("collectstatic", interactive=False, verbosity=0)
    seed_approvals(args.pending, args.decided)

    user, _ = get_user_model().objects.get_or_create(username="bench-admin")
    user.groups.add(Group.objects.get(name="admin"))
    # A host production settings allow (the test client says "testserver" otherwise).
    client = Client(SERVER_NAME="127.0.0.1")
    client.force_login(user)
    print(f"{Run.objects.count()} runs in the database, DEBUG={settings.DEBUG}")
    print(
        f"{'page':<40} {'p50 ms':>8} {'p95 ms':>8} {'CPU ms':>8} {'KB':>7} {'queries':>8}",
        flush=True,
    )
    for url in pages():
        times, cpus = [], []
        queries = size = 0
        for i in range(args.repeat + 2):
            with CaptureQueriesContext(connection) as ctx:
                cpu, started = time.process_time(), time.perf_counter()
                response = client.get(url, secure=True)
                if hasattr(response, "streaming_content"):
                    body = b"".join(response.streaming_content)
                else:
                    body = response.content
                elapsed = time.perf_counter() - started
                cpu = time.process_time() - cpu
            if response.status_code != 200:
                sys.exit(
                    f"{url}: HTTP {response.status_code} "
                    f"{response.get('Location', '')} {body[:300]!r}"
                )
            if i >= 2:  # the first two warm caches and connections
                times.append(elapsed * 1000)
                cpus.append(cpu * 1000)
                queries = len(ctx.captured_queries)
                size = len(body)
        print(
            f"{url[:40]:<40} {statistics.median(times):>8.1f} {percentile(times, 0.95):>8.1f} "
            f"{statistics.median(cpus):>8.1f} {size / 1024:>7.1f} {queries:>8}",
            flush=True,
        )
    print(f"after: {machine()}")


if __name__ == "__main__":
    main()
