"""Approval round trip: from the approver's decision request to the worker's next step committed.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentops_approvals \\
    REDIS_URL=redis://127.0.0.1:6379/4 uv run python bench/approval_roundtrip.py --count 50

What it does (Postgres + Redis, a real worker):
1. migrates, creates an operator and an approver (with an API token);
2. starts `celery -A agentops worker --pool threads` as a subprocess;
3. launches --count scripted sql-analyst runs whose report e-mail is gated (recipient off the
   allow-list) and waits until every one is `waiting`;
4. for each approval, one at a time: POST /api/approvals/{id}/decision (through Django's full
   request stack in this process, bearer-token auth, no HTTP socket), then polls the database
   every millisecond until the worker has committed the gated call's tool step;
5. prints p50/p90/p99/max of the decision request alone and of the whole round trip
   (decision commit -> Redis -> worker claims the run -> tool runs -> step committed), the
   share of it from the decision's timestamp to the step's (both stamped by their writers,
   so without this process's polling), the
   SQL queries per decision request and the machine's load; with --profile PATH, a cProfile
   of the decision requests (read it with `python -m pstats PATH`).

Run it with DEBUG=false (and a SECRET_KEY) for production figures: with DEBUG on, Django keeps
every query of the worker in memory and the figures include that.

Bounded: at most --count decisions and --timeout seconds; the worker is stopped by its PID.
"""

import argparse
import cProfile
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[index]


def describe(name: str, values_s: list[float]) -> str:
    ms = [v * 1000 for v in values_s]
    return (
        f"{name:<34} n={len(ms):<4} p50={percentile(ms, 50):7.1f} ms  "
        f"p90={percentile(ms, 90):7.1f} ms  p99={percentile(ms, 99):7.1f} ms  "
        f"max={max(ms):7.1f} ms  mean={statistics.fmean(ms):7.1f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=50, help="decisions to time (max 500)")
    parser.add_argument("--worker-threads", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=300.0, help="overall limit, seconds")
    parser.add_argument(
        "--profile", metavar="PATH", help="write a cProfile (pstats) of the decision requests"
    )
    args = parser.parse_args()
    count = max(1, min(args.count, 500))
    deadline = time.monotonic() + args.timeout

    db_url, redis_url = os.environ.get("DATABASE_URL", ""), os.environ.get("REDIS_URL", "")
    if not db_url.startswith("postgres") or not redis_url.startswith("redis"):
        sys.exit("set DATABASE_URL=postgres://… and REDIS_URL=redis://… (see the docstring)")

    import django

    django.setup()
    from django.contrib.auth.models import Group
    from django.core.management import call_command
    from django.db import connections
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from accounts.models import ApiToken, User
    from agentkit.agents import get_agent
    from agentops.celery import app
    from approvals.models import Approval
    from runs import engine
    from runs.models import Run, Step

    call_command("migrate", interactive=False, verbosity=0)
    operator, _ = User.objects.get_or_create(username="bench-operator")
    approver, _ = User.objects.get_or_create(username="bench-approver")
    operator.groups.add(Group.objects.get(name="operator"))
    approver.groups.add(Group.objects.get(name="approver"))
    _, raw = ApiToken.issue(approver, "bench")
    # A host production settings allow (the test client says "testserver" otherwise).
    client = Client(headers={"Authorization": f"Bearer {raw}"}, SERVER_NAME="127.0.0.1")
    app.control.purge()  # leftovers of an earlier, interrupted bench on this Redis db

    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "agentops",
            "worker",
            "--pool",
            "threads",
            "--concurrency",
            str(args.worker_threads),
            "--loglevel",
            "WARNING",
            "--without-heartbeat",
            "--without-mingle",
            "--without-gossip",
        ],
        cwd=ROOT,
        env=os.environ.copy(),
    )
    try:
        agent = get_agent("sql-analyst")
        data, errors = agent.validate_input(
            {"question": "Revenue by category?", "report_to": "boss@example.com"}
        )
        assert not errors, errors
        runs = [
            engine.launch(agent=agent, input=data, launched_by=operator, provider="scripted")
            for _ in range(count)
        ]
        ids = [r.pk for r in runs]
        print(f"launched {count} runs; waiting until each is gated…", flush=True)
        while Run.objects.filter(pk__in=ids, status=Run.Status.WAITING).count() < count:
            if worker.poll() is not None:
                sys.exit(f"the worker exited with {worker.returncode}")
            if time.monotonic() > deadline:
                sys.exit("timed out waiting for the runs to reach their gate")
            time.sleep(0.2)

        request_s: list[float] = []
        roundtrip_s: list[float] = []
        worker_s: list[float] = []
        queries: list[int] = []
        profiler = cProfile.Profile() if args.profile else None
        for run_id in ids:
            approval = Approval.objects.get(run_id=run_id, status=Approval.Status.PENDING)
            with CaptureQueriesContext(connections["default"]) as captured:
                if profiler:
                    profiler.enable()
                started = time.perf_counter()
                response = client.post(
                    f"/api/approvals/{approval.pk}/decision",
                    {"decision": "approve"},
                    content_type="application/json",
                    secure=True,
                )
                answered = time.perf_counter()
                if profiler:
                    profiler.disable()
            queries.append(len(captured))
            if response.status_code != 200:
                sys.exit(f"decision failed: {response.status_code} {response.content[:300]!r}")
            next_step = Step.objects.filter(
                run_id=run_id, kind=Step.Kind.TOOL, seq__gt=approval.gate_seq
            )
            while not next_step.exists():
                if time.monotonic() > deadline:
                    sys.exit("timed out waiting for the worker's step")
                time.sleep(0.001)
            done = time.perf_counter()
            request_s.append(answered - started)
            roundtrip_s.append(done - started)
            decided_at = Approval.objects.values_list("decided_at", flat=True).get(pk=approval.pk)
            stepped_at = next_step.values_list("created_at", flat=True).first()
            worker_s.append((stepped_at - decided_at).total_seconds())

        while Run.objects.filter(pk__in=ids, status__in=Run.ACTIVE_STATUSES).exists():
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        finished = Run.objects.filter(pk__in=ids, status=Run.Status.SUCCEEDED).count()
        print(
            f"\napproval round trip, {count} sequential decisions, worker --pool threads "
            f"--concurrency {args.worker_threads} (Postgres + Redis):"
        )
        print(describe("decision request (HTTP 200)", request_s))
        print(describe("decision -> next step committed", roundtrip_s))
        print(describe("  of which decided_at -> step at", worker_s))
        print(f"SQL queries per decision request: median {statistics.median(queries):.0f}")
        print(f"cores={os.cpu_count()}, load after={os.getloadavg()}")
        if profiler:
            profiler.dump_stats(args.profile)
            print(f"profile of the decision requests: {args.profile}")
        print(f"runs succeeded afterwards: {finished}/{count}")
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(15)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(5)
        connections.close_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
