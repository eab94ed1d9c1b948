"""Fleet scale: what a backlog of runs does to recovery, to people, and to other agents.

Three parts (--parts), each against real Celery worker processes (this module is their app:
it registers the benchmark agents and a probe task), the real Redis broker and Postgres:

- `resume`: N runs under an expired lease, as a fleet restart leaves them (seeded by
  launching them, then marking them `running` for a dead worker), then one sweep, as beat
  sends it. Printed: the sweep's time to re-send all N, and the time until every run was
  taken over by a worker and until every run finished, with the rate.
- `people`: a backlog of B launched runs in the run queue, worked by the workers, and a probe
  task sent to the people queue every half second, as an approval's notification or a
  decision's resume is: the delay from send to start, with a worker of its own on `-Q people`
  (the fleet's layout) and with one worker on every queue (a small install's).
- `fair`: AGENTOPS_RUN_QUEUES=2 and two agents on different run queues: agent B launches
  runs at a steady rate, alone and then behind agent A's flood of F queued runs. Printed: B's
  throughput and its runs' time from launch to end, both ways.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentops_bench_fleet \\
    REDIS_URL=redis://127.0.0.1:6379/13 \\
        uv run python bench/fleet_scale.py --resume-runs 10000 --backlog 100000 --flood 20000

It migrates its database and empties its runs and its Redis database's queues at the start
and the end (use databases of its own). The 100 000-run sweep alone: bench/sweep_scale.py.
"""

import argparse
import os
import signal
import subprocess
import sys
import time
import zlib
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("AGENTOPS_RUN_QUEUES", "2")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")

import django  # noqa: E402

django.setup()

import redis  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import transaction  # noqa: E402
from django.db.models import Max, Min  # noqa: E402
from django.utils import timezone  # noqa: E402

from agentkit.agents import Agent, GateRules, Limits, get_agent, register  # noqa: E402
from agentops.celery import app  # noqa: E402
from bench import engine_throughput  # noqa: E402  (the benchmark agents)
from bench.common import machine, percentile  # noqa: E402
from runs import engine, queue  # noqa: E402
from runs.models import Run  # noqa: E402

FLOODER = engine_throughput.AGENT  # "bench-loop"
PROBES = "fleet-scale-probes"


def _other_agent_slug() -> str:
    """A slug whose run queue differs from the flooder's, whatever the hash gives."""
    theirs = zlib.crc32(FLOODER.encode()) % 2
    return next(
        f"bench-other-{n}"
        for n in range(100)
        if zlib.crc32(f"bench-other-{n}".encode()) % 2 != theirs
    )


OTHER = _other_agent_slug()
if not get_agent(OTHER):
    flooder = get_agent(FLOODER)
    register(
        Agent(
            slug=OTHER,
            title="Benchmark loop (another agent)",
            description="The flooder's loop under another agent's name (benchmark only).",
            model=flooder.model,
            system_prompt=flooder.system_prompt,
            tools=flooder.tools,
            input_form=flooder.input_form,
            prompt=flooder.prompt,
            script=flooder.script,
            limits=flooder.limits,
            max_limits=flooder.max_limits,
            gates=GateRules(never_gate=flooder.tools),
        )
    )


def broker() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL)


@app.task(name="bench.fleet_scale.probe")
def probe(sent: float) -> None:
    """Stands for people-facing work (a notification, a decision's resume): says how long it
    waited from its send to its start."""
    broker().rpush(PROBES, time.time() - sent)


# ---------------------------------------------------------------------------- processes


class Workers:
    def __init__(self) -> None:
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, queues: str, concurrency: int) -> None:
        node = f"{name}-{os.getpid()}"
        self.procs[node] = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "bench.fleet_scale", "worker", "--pool",
             "threads", "-c", str(concurrency), "-Q", queues, "-n", f"{node}@%h",
             "--loglevel", "WARNING", "--without-gossip", "--without-mingle",
             "--without-heartbeat"],
            cwd=ROOT,
        )  # fmt: skip

    def wait_ready(self) -> None:
        host = os.uname().nodename
        deadline = time.monotonic() + 120
        for node, proc in self.procs.items():
            while not app.control.ping(destination=[f"{node}@{host}"], timeout=1):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"worker {node} did not start")
                time.sleep(0.5)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()


# ---------------------------------------------------------------------------- runs


def launch(agent_slug: str, count: int, k: int = 1) -> list:
    """`count` runs of k tool calls each, launched in transactions of 500; their messages
    are sent at each commit."""
    agent = get_agent(agent_slug)
    limits = Limits(k + 1, Decimal("1000"), 3600, 3)
    ids: list = []
    for start in range(0, count, 500):
        with transaction.atomic():
            ids += [
                engine.launch(agent=agent, input={"k": k}, limits=limits, provider="scripted").pk
                for _ in range(min(500, count - start))
            ]
    return ids


def clean() -> None:
    app.control.purge()
    broker().delete(PROBES)
    # The timeline is append-only (no DELETE): what a part left unfinished is ended instead,
    # so the next part's sweep does not take it for lost.
    Run.objects.filter(agent__in=(FLOODER, OTHER)).exclude(status__in=Run.TERMINAL_STATUSES).update(
        status=Run.Status.CANCELLED,
        termination_reason="cancelled",
        finished_at=timezone.now(),
        lease_owner="",
    )


def left(ids: list) -> int:
    return Run.objects.filter(pk__in=ids).exclude(status__in=Run.TERMINAL_STATUSES).count()


def wait_all_finished(ids: list, timeout: float, every: float = 2.0) -> float | None:
    """Seconds until every run of `ids` finished, or None at the timeout (what is left is
    printed)."""
    began = time.monotonic()
    while (remaining := left(ids)) and time.monotonic() - began < timeout:
        time.sleep(every)
    if remaining:
        print(f"  {remaining} of {len(ids)} runs not finished after {timeout:.0f} s")
        return None
    return time.monotonic() - began


# ---------------------------------------------------------------------------- parts


def part_resume(count: int, workers: int, concurrency: int, timeout: float) -> None:
    print(f"\n== resume: {count} runs under an expired lease, {workers} workers x {concurrency}")
    began = time.monotonic()
    ids = launch(FLOODER, count)
    app.control.purge()  # the fleet stopped: the launches' messages went with it
    gone = timezone.now() - timedelta(minutes=5)
    Run.objects.filter(pk__in=ids).update(
        status=Run.Status.RUNNING, lease_owner="dead-worker", lease_expires_at=gone, unsent=False
    )
    print(f"  seeded in {time.monotonic() - began:.1f} s")
    pool = Workers()
    for n in range(workers):
        pool.start(f"w{n}", "people,runs,runs.1,sweeps", concurrency)
    pool.wait_ready()
    try:
        queue.broker_lost_messages()  # the marker: this broker has lost nothing yet
        began = time.monotonic()
        sent = engine.sweep()
        swept = time.monotonic() - began
        print(f"  sweep: {sent} re-sent in {swept:.1f} s ({sent / swept:.0f} runs/s)")
        taken = None
        while time.monotonic() - began < timeout:
            if not Run.objects.filter(pk__in=ids, lease_owner="dead-worker").exists():
                taken = time.monotonic() - began
                break
            time.sleep(2)
        done = wait_all_finished(ids, timeout - (time.monotonic() - began))
        total = time.monotonic() - began
        finished = count - left(ids)
        print(f"  every run taken over by a worker: {fmt(taken)} after the sweep began")
        print(
            f"  every run finished: {fmt(done and total)} ({finished} finished, "
            f"{finished / total:.0f} runs/s)"
        )
    finally:
        pool.stop()
        clean()


def part_people(backlog: int, concurrency: int, probes: int) -> None:
    print(f"\n== people: probes on the people queue behind {backlog} queued runs")
    began = time.monotonic()
    launch(FLOODER, backlog, k=3)
    print(f"  backlog launched in {time.monotonic() - began:.1f} s; run queues {queue.depth()}")
    for layout, specs in (
        ("a people worker of its own", [("runs", "runs,runs.1,sweeps", concurrency),
                                         ("people", "people", 2)]),
        ("one worker on every queue", [("all", "people,runs,runs.1,sweeps", concurrency)]),
    ):  # fmt: skip
        broker().delete(PROBES)
        pool = Workers()
        for spec in specs:
            pool.start(*spec)
        pool.wait_ready()
        try:
            time.sleep(3)  # the workers are busy with the backlog
            for _ in range(probes):
                probe.apply_async(args=[time.time()], queue=queue.PEOPLE_QUEUE)
                time.sleep(0.5)
            deadline = time.monotonic() + 60
            while broker().llen(PROBES) < probes and time.monotonic() < deadline:
                time.sleep(0.2)
            delays = sorted(float(d) for d in broker().lrange(PROBES, 0, -1))
            print(
                f"  {layout}: {len(delays)}/{probes} probes, delay p50 {ms(median(delays))}, "
                f"p95 {ms(percentile(delays, 95))}, max {ms(delays[-1])}; "
                f"run queues still {queue.depth()}"
            )
        finally:
            pool.stop()
    clean()


def part_fair(flood: int, rate: float, seconds: float, concurrency: int) -> None:
    print(
        f"\n== fair: {OTHER} launches {rate:g} runs/s for {seconds:g} s, alone and behind "
        f"{FLOODER}'s {flood} queued runs (queues {queue.run_queue(OTHER)} and "
        f"{queue.run_queue(FLOODER)}; 1 worker x {concurrency})"
    )
    figures = {}
    for case in ("alone", "flooded"):
        pool = Workers()
        pool.start("fair", "people,runs,runs.1,sweeps", concurrency)
        if case == "flooded":
            launch(FLOODER, flood, k=3)
        pool.wait_ready()
        try:
            ids = []
            began = time.monotonic()
            for n in range(int(rate * seconds)):
                ids += launch(OTHER, 1)
                time.sleep(max(0.0, began + (n + 1) / rate - time.monotonic()))
            wait_all_finished(ids, timeout=300)
            runs = Run.objects.filter(pk__in=ids)
            span = runs.aggregate(first=Min("created_at"), last=Max("finished_at"))
            took = [(r.finished_at - r.created_at).total_seconds() for r in runs if r.finished_at]
            took.sort()
            wall = (span["last"] - span["first"]).total_seconds()
            figures[case] = len(took) / wall
            print(
                f"  {case}: {len(took)} runs in {wall:.1f} s ({figures[case]:.2f} runs/s), "
                f"launch to end p50 {ms(median(took))}, p95 {ms(percentile(took, 95))}; "
                f"run queues {queue.depth()}"
            )
        finally:
            pool.stop()
            clean()
    print(f"  throughput flooded / alone: {figures['flooded'] / figures['alone']:.2f}")


def fmt(seconds: float | None) -> str:
    return "not within the timeout" if seconds is None else f"{seconds:.1f} s"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="resume,people,fair")
    parser.add_argument("--resume-runs", type=int, default=10_000)
    parser.add_argument("--resume-timeout", type=float, default=900)
    parser.add_argument("--workers", type=int, default=2, help="for the resume part")
    parser.add_argument("--concurrency", type=int, default=8, help="threads per worker")
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--probes", type=int, default=20)
    parser.add_argument("--flood", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=4.0, help="the other agent's runs/s")
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    if not settings.DATABASES["default"]["ENGINE"].endswith("postgresql") or not settings.REDIS_URL:
        sys.exit("needs DATABASE_URL=postgres://... and REDIS_URL=redis://... of its own")
    call_command("migrate", verbosity=0)
    clean()
    print(machine())
    parts = args.parts.split(",")
    try:
        if "resume" in parts:
            part_resume(args.resume_runs, args.workers, args.concurrency, args.resume_timeout)
        if "people" in parts:
            part_people(args.backlog, args.concurrency, args.probes)
        if "fair" in parts:
            part_fair(args.flood, args.rate, args.seconds, args.concurrency)
    finally:
        clean()
        print(machine())


if __name__ == "__main__":
    main()
