"""Approval round trip: from the approver's decision over HTTP to the worker's next step committed,
paired with LangGraph's in-process resume of an interrupted graph.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentops_approvals \\
    REDIS_URL=redis://127.0.0.1:6379/4 \\
        uv run --group bench python bench/approval_roundtrip.py --count 50

What it does (Postgres + Redis, a real server and a real worker, DEBUG=false unless set):
1. migrates, creates an operator and an approver (with an API token);
2. starts `manage.py up` (daphne, the production middleware; with REDIS_URL it serves only)
   and `celery -A agentops worker --pool threads` as subprocesses;
3. launches --count scripted sql-analyst runs whose report e-mail is gated (recipient off the
   allow-list) and waits until every one is `waiting`; one more run is decided through
   Django's test client in this process, untimed, only to count the decision's SQL queries;
4. for each approval, one at a time: POST /api/approvals/{id}/decision over a kept-alive HTTP
   connection to daphne (bearer token, X-Forwarded-Proto: https as production's proxy sets;
   any status but 200 stops the bench), then polls the database every millisecond until the
   worker has committed the gated call's tool step. Right after it, LangGraph's side of the
   pair (optional `bench` dependency group, --skip-langgraph without it): a 2-node graph
   (gate node calling interrupt(), tool node) with the sync PostgresSaver on the same
   database, resumed in this process with Command(resume=...) until the tool node's
   checkpoint is committed;
5. prints p50/p90/p99/max of the decision request alone, of the whole round trip (decision
   commit -> Redis -> worker claims the run -> tool runs -> step committed), of the share of
   it from the decision's timestamp to the step's (both stamped by their writers, so without
   this process's polling), of LangGraph's resume, and the ratio of the p50s; the SQL queries
   per decision; CPU per decision of the server, the worker and this process; the load
   average before and after. With --profile PATH, a cProfile of the test-client decision.

Bounded: at most --count decisions and --timeout seconds; server and worker are stopped by
their PIDs.
"""

import argparse
import cProfile
import json
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
# Production figures: DEBUG on keeps every query of the server and the worker in memory.
# The subprocesses inherit this environment.
os.environ.setdefault("DEBUG", "false")
os.environ.setdefault("SECRET_KEY", "bench-only-not-a-secret")

from bench.common import Client, cpu_seconds, machine, own_cpu_seconds, percentile, serve, stop  # noqa: E402


def describe(name: str, values_s: list[float]) -> str:
    ms = [v * 1000 for v in values_s]
    return (
        f"{name:<34} n={len(ms):<4} p50={percentile(ms, 0.5):7.1f} ms  "
        f"p90={percentile(ms, 0.9):7.1f} ms  p99={percentile(ms, 0.99):7.1f} ms  "
        f"max={max(ms):7.1f} ms  mean={statistics.fmean(ms):7.1f} ms"
    )


class LangGraphResume:
    """START -> gate (interrupt) -> tool -> END on PostgresSaver; `resume(i)` times
    Command(resume=...) of thread i until invoke returns (the tool node's checkpoint is
    committed)."""

    def __init__(self, count: int):
        from django.conf import settings
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.graph import END, START, StateGraph
        from langgraph.types import interrupt
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool
        from typing_extensions import TypedDict

        class State(TypedDict, total=False):
            to: str
            decision: str
            sent: dict

        def gate(state: State) -> dict:
            return {"decision": interrupt({"tool": "send_email", "to": state["to"]})}

        def tool(state: State) -> dict:
            return {"sent": {"to": state["to"], "ok": state["decision"] == "approve"}}

        db = settings.DATABASES["default"]
        self.pool = ConnectionPool(
            f"host={db['HOST']} port={db['PORT'] or 5432} dbname={db['NAME']} "
            f"user={db['USER']} password={db['PASSWORD']}",
            min_size=1,
            max_size=2,
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
            open=True,
        )
        saver = PostgresSaver(self.pool)
        saver.setup()
        graph = StateGraph(State)
        graph.add_node("gate", gate)
        graph.add_node("tool", tool)
        graph.add_edge(START, "gate")
        graph.add_edge("gate", "tool")
        graph.add_edge("tool", END)
        self.graph = graph.compile(checkpointer=saver)
        self.prefix = f"approval-bench-{os.getpid()}-{time.time_ns()}"
        for i in range(count):
            self.graph.invoke({"to": "boss@example.com"}, self._config(i))

    def _config(self, i: int) -> dict:
        return {"configurable": {"thread_id": f"{self.prefix}-{i}"}}

    def resume(self, i: int) -> float:
        from langgraph.types import Command

        started = time.perf_counter()
        out = self.graph.invoke(Command(resume="approve"), self._config(i))
        elapsed = time.perf_counter() - started
        assert out["sent"]["ok"], out
        return elapsed

    def close(self) -> None:
        self.pool.close()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=50, help="decisions to time (max 500)")
    parser.add_argument("--worker-threads", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=300.0, help="overall limit, seconds")
    parser.add_argument("--skip-langgraph", action="store_true")
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
    from django.test import Client as TestClient
    from django.test.utils import CaptureQueriesContext

    from accounts.models import ApiToken, User
    from agentkit.agents import get_agent
    from agentops.celery import app
    from approvals.models import Approval
    from runs import engine
    from runs.models import Run, Step

    print(f"before: {machine()}", flush=True)
    call_command("migrate", interactive=False, verbosity=0)
    operator, _ = User.objects.get_or_create(username="bench-operator")
    approver, _ = User.objects.get_or_create(username="bench-approver")
    operator.groups.add(Group.objects.get(name="operator"))
    approver.groups.add(Group.objects.get(name="approver"))
    _, raw = ApiToken.issue(approver, "bench")
    app.control.purge()  # leftovers of an earlier, interrupted bench on this Redis db

    server = serve()
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
    http = Client(server.url, {"Authorization": f"Bearer {raw}"})
    langgraph = None
    try:
        agent = get_agent("sql-analyst")
        data, errors = agent.validate_input(
            {"question": "Revenue by category?", "report_to": "boss@example.com"}
        )
        assert not errors, errors
        runs = [
            engine.launch(agent=agent, input=data, launched_by=operator, provider="scripted")
            for _ in range(count + 2)
        ]
        ids = [r.pk for r in runs]
        print(f"launched {count + 2} runs; waiting until each is gated…", flush=True)
        while Run.objects.filter(pk__in=ids, status=Run.Status.WAITING).count() < len(ids):
            if worker.poll() is not None:
                sys.exit(f"the worker exited with {worker.returncode}")
            if time.monotonic() > deadline:
                sys.exit("timed out waiting for the runs to reach their gate")
            time.sleep(0.2)
        if not args.skip_langgraph:
            langgraph = LangGraphResume(count)

        # The SQL of one decision, counted in this process through the same view (untimed),
        # after one that warms this process up (its first request imports the URL conf).
        def decide_in_process(run_id) -> int:
            approval = Approval.objects.get(run_id=run_id, status=Approval.Status.PENDING)
            with CaptureQueriesContext(connections["default"]) as captured:
                if profiler and run_id == ids[-1]:
                    profiler.enable()
                response = TestClient(
                    headers={"Authorization": f"Bearer {raw}"}, SERVER_NAME="127.0.0.1"
                ).post(
                    f"/api/approvals/{approval.pk}/decision",
                    {"decision": "approve"},
                    content_type="application/json",
                    secure=True,
                )
                profiler and profiler.disable()
            if response.status_code != 200:
                sys.exit(f"decision failed: {response.status_code} {response.content[:300]!r}")
            return len(captured)

        profiler = cProfile.Profile() if args.profile else None
        decide_in_process(ids.pop(-2))
        queries = decide_in_process(ids[-1])
        ids.pop()
        http.request("GET", "/healthz")  # the connection is open before the first timing

        request_s: list[float] = []
        roundtrip_s: list[float] = []
        worker_s: list[float] = []
        resume_s: list[float] = []
        cpu_before = own_cpu_seconds(), cpu_seconds(server.pid), cpu_seconds(worker.pid)
        started_all = time.perf_counter()
        for i, run_id in enumerate(ids):
            approval = Approval.objects.get(run_id=run_id, status=Approval.Status.PENDING)
            next_step = Step.objects.filter(
                run_id=run_id, kind=Step.Kind.TOOL, seq__gt=approval.gate_seq
            )
            started = time.perf_counter()
            http.request(
                "POST",
                f"/api/approvals/{approval.pk}/decision",
                body=json.dumps({"decision": "approve"}).encode(),
                headers={"Content-Type": "application/json"},
            )
            answered = time.perf_counter()
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
            if langgraph:
                resume_s.append(langgraph.resume(i))
        wall = time.perf_counter() - started_all
        cpu_after = own_cpu_seconds(), cpu_seconds(server.pid), cpu_seconds(worker.pid)

        while Run.objects.filter(pk__in=ids, status__in=Run.ACTIVE_STATUSES).exists():
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        finished = Run.objects.filter(pk__in=ids, status=Run.Status.SUCCEEDED).count()
        print(
            f"\napproval round trip, {count} sequential decisions over HTTP to daphne, worker "
            f"--pool threads --concurrency {args.worker_threads} (Postgres + Redis, "
            f"DEBUG={os.environ['DEBUG']}):"
        )
        print(describe("decision request (HTTP 200)", request_s))
        print(describe("decision -> next step committed", roundtrip_s))
        print(describe("  of which decided_at -> step at", worker_s))
        if resume_s:
            print(describe("LangGraph resume -> tool checkpoint", resume_s))
            ratios = [a / b for a, b in zip(roundtrip_s, resume_s, strict=True)]
            p50_ratio = percentile(roundtrip_s, 0.5) / percentile(resume_s, 0.5)
            print(
                f"ours / LangGraph: p50 {p50_ratio:.2f}x"
                f" (median of per-pair ratios {statistics.median(ratios):.2f}x)"
            )
        print(f"SQL queries per decision request: {queries}")
        per = 1000 / count
        print(
            f"CPU per decision (ms): server {(cpu_after[1] - cpu_before[1]) * per:.1f}, "
            f"worker {(cpu_after[2] - cpu_before[2]) * per:.1f}, this process (polling"
            f"{', LangGraph' if langgraph else ''}) {(cpu_after[0] - cpu_before[0]) * per:.1f}; "
            f"wall {wall:.1f} s for the loop"
        )
        print(f"after: {machine(server=server.pid, worker=worker.pid)}")
        if profiler:
            profiler.dump_stats(args.profile)
            print(f"profile of the counted decision: {args.profile}")
        print(f"runs succeeded afterwards: {finished}/{count}")
        if finished < count:
            return 1
    finally:
        http.close()
        if langgraph:
            langgraph.close()
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(15)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(5)
        stop(server)
        connections.close_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
