"""Live latency: a step committed -> its fragment received by WebSocket watchers in another
process, through a real daphne on Redis.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentops_bench \\
    REDIS_URL=redis://127.0.0.1:6379/14 \\
        uv run python bench/live_latency.py --watchers 100 --runs 5 --steps 20

Starts `manage.py up` (daphne, the production stack, DEBUG=false unless set; with REDIS_URL it
serves only) on a free 127.0.0.1 port, and a second process of this script (--watch) that holds
the watchers: N authenticated WebSocket clients on one run's stream. For each of --runs runs,
one after another: the watchers connect to the new run (`?after=` its head), and once every
one is in, this process appends --steps steps the way a worker does (run row lock,
hash-chained step, publish after commit), cycling model turn (text, tokens, cost) -> tool
call (args and result) -> model turn -> ... with a status step every fifth. The watcher
process stamps when each seq arrived on each socket; latency is arrival minus commit (one
machine, one clock). Every step counts, the first of each run too; the first, the 2nd-5th
and the later steps of a run are also reported apart (the watchers have just connected when
the first is committed, as when people open a run's page as it starts). The watchers share
one login unless --sessions says how many users to spread them over.

Prints p50/p99/max per kind and overall, the load average and CPU time of this process, the
watcher process and the server before and after. Stops both subprocesses by their PIDs.
"""

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
os.environ.setdefault("DEBUG", "false")  # production figures; the server inherits it
os.environ.setdefault("SECRET_KEY", "bench-only-not-a-secret")

from bench.common import cpu_seconds, machine, percentile, serve, stop  # noqa: E402

SEQ_RE = re.compile(r'data-seq="(\d+)"')


# --- the watcher process (--watch) ---------------------------------------------------------------
def seq_of(message: str) -> int | None:
    if message.lstrip().startswith("{"):
        return json.loads(message).get("seq")
    match = SEQ_RE.search(message)
    return int(match.group(1)) if match else None


async def watch(url: str, cookie: str, origin: str, got: dict, ready: asyncio.Event, n: int):
    from websockets.asyncio.client import connect

    async with connect(url, additional_headers={"Cookie": cookie}, origin=origin) as ws:
        ready.set()
        while len(got) < n:
            message = await asyncio.wait_for(ws.recv(), timeout=30)
            seq = seq_of(message)
            if seq is not None:
                got.setdefault(seq, time.time())


async def watch_run(base: str, cookies: list[str], watchers: int, job: dict) -> list[dict]:
    url = base.replace("http", "ws") + f"/ws/runs/{job['run']}/?after={job['after']}"
    arrivals: list[dict] = [{} for _ in range(watchers)]
    readies = [asyncio.Event() for _ in range(watchers)]
    tasks = [
        asyncio.create_task(
            watch(url, cookies[i % len(cookies)], base, arrivals[i], readies[i], job["steps"])
        )
        for i in range(watchers)
    ]
    await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), timeout=60)
    print("ready", flush=True)
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=120)
    return arrivals


def watcher_process(base: str, watchers: int) -> None:
    """Reads one JSON job a line ({run, after, steps}) and its cookies first; answers 'ready'
    once every socket is open, then one JSON line of arrivals per socket."""
    cookies = json.loads(sys.stdin.readline())

    async def serve_jobs() -> None:
        for line in sys.stdin:
            arrivals = await watch_run(base, cookies, watchers, json.loads(line))
            print(json.dumps(arrivals), flush=True)

    asyncio.run(serve_jobs())


# --- this process: the writer --------------------------------------------------------------------
KINDS = ("llm", "tool", "llm", "tool", "status")


def append_step(run_id, n: int) -> tuple[str, float]:
    from django.db import transaction

    from runs.models import Run, Step

    kind = KINDS[n % len(KINDS)]
    with transaction.atomic():
        run = Run.locked(run_id)
        if kind == "llm":
            text = f"Step {n}: checking the order and the refund policy before answering."
            data = {
                "content": [
                    {"type": "text", "text": text},
                    {"type": "tool_use", "id": f"toolu_{n}", "name": "lookup_order",
                     "input": {"order_id": n}},
                ],
                "model": "claude-sonnet-4-6",
                "stop_reason": "tool_use",
            }  # fmt: skip
            run.append_step(
                Step.Kind.LLM, data, cost_usd=Decimal("0.0012"), tokens_in=812,
                tokens_out=64, latency_ms=900,
            )  # fmt: skip
        elif kind == "tool":
            data = {
                "tool": "lookup_order",
                "tool_use_id": f"toolu_{n - 1}",
                "args": {"order_id": n - 1},
                "result": {"order_id": n - 1, "status": "delivered", "total": "42.50",
                           "items": [{"sku": "A-1", "qty": 2}, {"sku": "B-7", "qty": 1}]},
                "is_error": False,
            }  # fmt: skip
            run.append_step(Step.Kind.TOOL, data, latency_ms=3)
        else:
            run.append_step(Step.Kind.STATUS, {"event": "bench", "n": n, "to": run.status})
    return kind, time.time()  # publish_step ran on commit, just before this line


def report(name: str, values: list[float]) -> None:
    if values:
        print(
            f"  {name:<22} n={len(values):<6} p50 {percentile(values, 0.5):7.1f} ms  "
            f"p99 {percentile(values, 0.99):7.1f} ms  max {max(values):7.1f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--watchers", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5, help="runs watched one after another")
    parser.add_argument("--steps", type=int, default=20, help="steps appended to each run")
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between steps")
    parser.add_argument(
        "--sessions", type=int, default=1, help="logged-in users the watchers are spread over"
    )
    parser.add_argument("--watch", metavar="URL", help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    if args.watch:
        watcher_process(args.watch, args.watchers)
        return

    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.core.management import call_command
    from django.test import Client

    from agentkit.agents import get_agent
    from runs import engine

    if settings.EMBEDDED:
        sys.exit("set REDIS_URL (and DATABASE_URL): this measures the production topology")
    print(f"before: {machine()}", flush=True)
    call_command("migrate", verbosity=0)
    cookies = []
    for i in range(max(1, args.sessions)):
        name = "bench-watcher" if i == 0 else f"bench-watcher-{i}"
        user, _ = get_user_model().objects.get_or_create(username=name)
        user.groups.add(Group.objects.get(name="viewer"))
        client = Client()
        client.force_login(user)
        cookies.append(f"sessionid={client.cookies['sessionid'].value}")

    server = serve()
    child = subprocess.Popen(
        [sys.executable, __file__, "--watch", server.url, "--watchers", str(args.watchers)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    agent = get_agent("refund-desk")
    runs = []
    latencies: dict[str, list[float]] = {}
    delivered = 0
    try:
        child.stdin.write(json.dumps(cookies) + "\n")
        print(f"server pid {server.pid}, watcher process pid {child.pid}", flush=True)
        cpu_before = cpu_seconds(server.pid), cpu_seconds(child.pid)
        started = time.perf_counter()
        stepping_cpu = 0.0  # the server's, from the watchers' ready to their last arrival
        for _ in range(args.runs):
            # Nobody consumes the queue here: the run stays queued while we append to it.
            run = engine.launch(
                agent=agent, input={"order_id": 1, "reason": "bench"}, provider="scripted"
            )
            runs.append(run)
            job = {"run": str(run.pk), "after": run.last_seq, "steps": args.steps}
            child.stdin.write(json.dumps(job) + "\n")
            child.stdin.flush()
            if child.stdout.readline().strip() != "ready":
                sys.exit("the watcher process did not connect its watchers")
            committed: dict[int, tuple[str, float]] = {}
            stepping_from = cpu_seconds(server.pid)
            for i in range(args.steps):
                committed[run.last_seq + 1 + i] = append_step(run.pk, i)
                time.sleep(args.interval)
            line = child.stdout.readline()
            stepping_cpu += cpu_seconds(server.pid) - stepping_from
            if not line:
                sys.exit(f"the watcher process exited with {child.wait()}")
            for per_watcher in json.loads(line):
                for seq, at in per_watcher.items():
                    if int(seq) in committed:
                        kind, commit_at = committed[int(seq)]
                        ms = (at - commit_at) * 1000
                        latencies.setdefault(kind, []).append(ms)
                        position = int(seq) - run.last_seq
                        band = (
                            "first step of a run"
                            if position == 1
                            else "steps 2-5 of a run"
                            if position <= 5
                            else "steps 6+ of a run"
                        )
                        latencies.setdefault(band, []).append(ms)
                        delivered += 1
        wall = time.perf_counter() - started
        cpu_after = cpu_seconds(server.pid), cpu_seconds(child.pid)
        expected = args.watchers * args.steps * args.runs
        every = [ms for kind, values in latencies.items() if kind in KINDS for ms in values]
        print(
            f"\n{args.watchers} watchers (another process) x {args.runs} runs x {args.steps} "
            f"steps, every {args.interval * 1000:.0f} ms; deliveries {delivered}/{expected}; "
            f"DEBUG={os.environ['DEBUG']}"
        )
        print("commit -> received:")
        report("every step", every)
        bands = ("first step of a run", "steps 2-5 of a run", "steps 6+ of a run")
        for kind in ("llm", "tool", "status", *bands):
            report(kind, latencies.get(kind, []))
        per = 1000 / max(1, args.runs * args.steps)
        print(
            "CPU per step, connecting the watchers included (ms): "
            f"server {(cpu_after[0] - cpu_before[0]) * per:.1f}, "
            f"watcher process {(cpu_after[1] - cpu_before[1]) * per:.1f}; wall {wall:.1f} s"
        )
        print(
            f"server CPU per step while stepping (the watchers connected): "
            f"{stepping_cpu * per:.1f} ms, i.e. {stepping_cpu * per * 1000 / args.watchers:.0f}"
            " µs per delivery"
        )
        print(f"after: {machine(server=server.pid, watchers=child.pid)}")
        if delivered < expected:
            sys.exit("some steps never reached some watchers")
    finally:
        if child.poll() is None:
            child.stdin.close()
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        stop(server)
        for run in runs:
            run.cancel(reason="benchmark finished")


if __name__ == "__main__":
    main()
