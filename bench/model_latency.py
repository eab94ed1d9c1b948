"""Concurrency under model latency: N runs against the fake Messages API (1 s per call).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentops_benchmark \
    REDIS_URL=redis://127.0.0.1:6379/12 \
        uv run --group bench python bench/model_latency.py --runs 200 --turns 3 \
            --concurrency 200 --pool-max 20 --repeat 3 [--sustain 30]

Starts the fake server (tests/support/fake_messages_api.py) in this process with --latency seconds
per call, and one real `celery -A bench.engine_throughput worker --pool threads -c C`
subprocess with ANTHROPIC_API_KEY=fake ANTHROPIC_BASE_URL=<fake url> (and DATABASE_POOL_MAX
when --pool-max is given), so runs launched with provider="anthropic" go through the real
SDK provider. Each run makes --turns tool-calling model calls (the bench agent's instant
bench_noop) and one final answer. Ideal throughput is N model calls per latency; achieved
is all model calls / wall time from enqueue to the last run finished. Median of --repeat,
after one warm-up round at the largest N (shown, not counted: a cold worker's threads open
their connections and clients then).
With --sustain SECONDS, each round keeps N runs in flight instead: a run that finishes is
replaced by a new one at once, for SECONDS. Achieved is then the model calls completed per
second within a window that opens one run's length ((turns + 1) x latency) after the start,
when the launch burst is over and runs start and finish all the time, and closes at SECONDS:
steady concurrency, with each run's start and end still in it, without the burst of N runs
launched in one instant and their staggered start.
The worker awaits its runs' model calls on its event loop (runs/engine/in_flight.py) unless
AGENTOPS_MODEL_CALLS_IN_FLIGHT=0 is set (each call then waits in a worker thread: the pair
for before and after). Each round says how many calls waited at the fake at most at once.
Stops the worker (by PID) and the server at the end.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import engine_throughput as et

from tests.support.fake_messages_api import FakeMessagesServer, Reply, text, tool_use


class LoopServer(FakeMessagesServer):
    """The default policy, with distinct arguments each turn (bench_noop takes `n`)."""

    def __init__(self, *, turns: int, **kwargs):
        super().__init__(**kwargs)
        self.turns = turns

    def _default_reply(self, body: dict) -> Reply:
        done = sum(1 for m in body["messages"] if m.get("role") == "assistant")
        if done < self.turns:
            return Reply([tool_use("bench_noop", n=done)])
        return Reply([text("Done.")])


def one_round(n: int, turns: int, latency: float, worker_pid: int) -> dict:
    from runs.models import Run

    cpu_before = et.cpu_seconds(worker_pid), time.process_time(), et.postgres_cpu_seconds()
    started = time.time()
    run_ids = et.launch_runs(n, turns, provider="anthropic")
    et.wait_finished(run_ids, timeout=max(120, 20 * (turns + 1) * latency * n / 50))
    runs = list(Run.objects.filter(pk__in=run_ids))
    failed = [r for r in runs if r.status != Run.Status.SUCCEEDED]
    if failed:
        raise SystemExit(f"{len(failed)} runs failed: {failed[0].status_detail}")
    seconds = max(r.finished_at for r in runs).timestamp() - started
    cpu_after = et.cpu_seconds(worker_pid), time.process_time(), et.postgres_cpu_seconds()
    calls = n * (turns + 1)
    cpu = [(b - a) * 1000 / calls for a, b in zip(cpu_before, cpu_after, strict=True)]
    achieved = calls / seconds
    ideal = n / latency
    return {
        "seconds": seconds,
        "achieved": achieved,
        "ideal": ideal,
        "ratio": achieved / ideal,
        "cpu": cpu,
    }


def sustained_round(n: int, turns: int, latency: float, seconds: float, worker_pid: int) -> dict:
    from datetime import UTC, datetime

    from django.db.models import Count, Q

    from runs.models import Run, Step

    cpu_before = et.cpu_seconds(worker_pid), time.process_time(), et.postgres_cpu_seconds()
    started = time.time()
    inflight = set(et.launch_runs(n, turns, provider="anthropic"))
    launched = set(inflight)
    while time.time() < started + seconds:
        done = et.finished(inflight)
        if any(status != Run.Status.SUCCEEDED for status in done.values()):
            raise SystemExit(f"a run ended {set(done.values())}")
        if done:
            inflight -= done.keys()
            fresh = et.launch_runs(len(done), turns, provider="anthropic")
            inflight.update(fresh)
            launched.update(fresh)
        time.sleep(0.05)
    et.wait_finished(list(inflight), timeout=120)
    cpu_after = et.cpu_seconds(worker_pid), time.process_time(), et.postgres_cpu_seconds()
    window = (started + (turns + 1) * latency, started + seconds)
    in_window = Q(
        created_at__gte=datetime.fromtimestamp(window[0], UTC),
        created_at__lt=datetime.fromtimestamp(window[1], UTC),
    )
    counts = Step.objects.filter(run__in=launched, kind=Step.Kind.LLM).aggregate(
        calls=Count("pk"), in_window=Count("pk", filter=in_window)
    )
    calls, calls_in_window = counts["calls"], counts["in_window"]
    cpu = [(b - a) * 1000 / calls for a, b in zip(cpu_before, cpu_after, strict=True)]
    achieved = calls_in_window / (window[1] - window[0])
    ideal = n / latency
    return {
        "seconds": window[1] - window[0],
        "achieved": achieved,
        "ideal": ideal,
        "ratio": achieved / ideal,
        "cpu": cpu,
        "runs": len(launched),
    }


def report(label: str, n: int, r: dict, worker_pid: int, server: LoopServer) -> None:
    worker, server_side, pg = r["cpu"]
    if "runs" in r:
        span = f"over a {r['seconds']:.1f} s window ({r['runs']} runs in the round)"
    else:
        span = f"in {r['seconds']:.1f} s"
    print(
        f"  N={n}{f' ({label})' if label else ''}: {r['achieved']:.1f} calls/s of ideal "
        f"{r['ideal']:.0f} ({100 * r['ratio']:.0f} %) {span}; CPU ms per call: "
        f"worker {worker:.1f}, fake server + this script {server_side:.1f}, Postgres {pg:.1f}; "
        f"worker RSS {et.worker_rss_kb(worker_pid) // 1024} MB; "
        f"at most {server.max_in_flight} calls waited on the model at once"
    )
    server.max_in_flight = 0  # the next round's own


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", default="200", help="N concurrent runs, comma-separated")
    parser.add_argument("--turns", type=int, default=3, help="tool-calling turns per run")
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=0, help="worker threads (0: default)")
    parser.add_argument("--pool-max", type=int, default=0, help="DATABASE_POOL_MAX (0: default)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--sustain", type=float, default=0, help="keep N runs in flight for this many seconds"
    )
    args = parser.parse_args()
    if args.sustain and args.sustain < 2 * (args.turns + 1) * args.latency:
        parser.error("--sustain: at least two runs' length, (turns + 1) x latency each")
    from django.conf import settings

    if not (settings.IS_POSTGRES and settings.REDIS_URL):
        raise SystemExit("set DATABASE_URL (Postgres) and REDIS_URL; see the docstring")
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    server = LoopServer(turns=args.turns, latency=args.latency).start()
    env = {"ANTHROPIC_API_KEY": "fake", "ANTHROPIC_BASE_URL": server.base_url}
    if args.pool_max:
        env["DATABASE_POOL_MAX"] = str(args.pool_max)
    concurrency = args.concurrency or settings.CELERY_WORKER_CONCURRENCY
    print(
        f"turns={args.turns}, latency={args.latency}s, worker -c {concurrency}, "
        f"DATABASE_POOL_MAX={env.get('DATABASE_POOL_MAX', 'default')}; "
        f"cores={os.cpu_count()}, load={os.getloadavg()}"
    )
    proc = et.start_worker(concurrency, extra_env=env)
    results: dict[int, list[dict]] = {}
    try:
        ns = [int(x) for x in args.runs.split(",")]
        # A cold worker opens a database connection, an HTTP client and its connection per
        # thread during its first round; that round is shown but not counted.
        warm_up = one_round(max(ns), args.turns, args.latency, proc.pid)
        report("warm-up, not counted", max(ns), warm_up, proc.pid, server)
        for _ in range(args.repeat):
            for n in ns:
                if args.sustain:
                    r = sustained_round(n, args.turns, args.latency, args.sustain, proc.pid)
                else:
                    r = one_round(n, args.turns, args.latency, proc.pid)
                results.setdefault(n, []).append(r)
                report("", n, r, proc.pid, server)
        print(f"worker RSS {et.worker_rss_kb(proc.pid)} kB")
    finally:
        et.stop_worker(proc)
        server.stop()
    print(f"\n{'N':>5}{'calls/s':>10}{'ideal':>8}{'% ideal':>9}   rounds (% ideal)")
    for n, rounds in results.items():
        print(
            f"{n:>5}{statistics.median(r['achieved'] for r in rounds):>10.1f}"
            f"{rounds[0]['ideal']:>8.0f}"
            f"{100 * statistics.median(r['ratio'] for r in rounds):>9.0f}"
            f"   {[round(100 * r['ratio']) for r in rounds]}"
        )
    print(f"load after: {os.getloadavg()} (shared 2-core machine, other jobs running)")


if __name__ == "__main__":
    main()
