"""Live latency: a step committed -> its fragment received by WebSocket watchers, on Redis.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentops_bench \
    REDIS_URL=redis://127.0.0.1:6379/14 \
        uv run python bench/live_latency.py --watchers 100 --steps 50

Starts a real daphne (agentops.asgi) on a free 127.0.0.1 port, opens N authenticated
WebSocket watchers on one run's stream, then appends steps the way a worker does (run row
lock, hash-chained step, publish after commit). Each watcher records when each seq arrived;
latency is arrival minus commit. The watchers share one login unless --sessions says how
many users to spread them over (each socket re-checks its session's access periodically).
Prints the machine's load before and after. Stops daphne by its PID when done.
"""

import argparse
import asyncio
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.contrib.auth.models import Group  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import transaction  # noqa: E402
from django.test import Client  # noqa: E402
from websockets.asyncio.client import connect  # noqa: E402

from agentkit.agents import get_agent  # noqa: E402
from runs import engine  # noqa: E402
from runs.models import Run, Step  # noqa: E402

SEQ_RE = re.compile(r'data-seq="(\d+)"')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def seq_of(message: str) -> int | None:
    if message.lstrip().startswith("{"):
        return json.loads(message).get("seq")
    match = SEQ_RE.search(message)
    return int(match.group(1)) if match else None


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def append_step(run_id, n: int) -> float:
    with transaction.atomic():
        run = Run.locked(run_id)
        run.append_step(Step.Kind.STATUS, {"event": "bench", "n": n, "to": run.status})
    return time.time()  # publish_step ran on commit, just before this line


async def watch(url: str, cookie: str, origin: str, arrivals: dict, ready: asyncio.Event, n: int):
    async with connect(url, additional_headers={"Cookie": cookie}, origin=origin) as ws:
        ready.set()
        got = arrivals.setdefault(id(ws), {})
        while len(got) < n:
            message = await asyncio.wait_for(ws.recv(), timeout=30)
            seq = seq_of(message)
            if seq is not None:
                got.setdefault(seq, time.time())


async def bench(args, base: str, cookies: list[str], run: Run) -> None:
    origin = base
    url = base.replace("http", "ws") + f"/ws/runs/{run.pk}/?after={run.last_seq}"
    arrivals: dict = {}
    readies = [asyncio.Event() for _ in range(args.watchers)]
    tasks = [
        asyncio.create_task(
            watch(url, cookies[i % len(cookies)], origin, arrivals, readies[i], args.steps)
        )
        for i in range(args.watchers)
    ]
    await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), timeout=60)
    await asyncio.sleep(1.0)  # every consumer has joined its group
    first_seq = run.last_seq + 1
    committed: dict[int, float] = {}
    for i in range(args.steps):
        committed[first_seq + i] = await asyncio.to_thread(append_step, run.pk, i)
        await asyncio.sleep(args.interval)
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
    latencies = [
        (at - committed[seq]) * 1000
        for per_watcher in arrivals.values()
        for seq, at in per_watcher.items()
        if seq in committed
    ]
    expected = args.watchers * args.steps
    print(f"watchers {args.watchers}, steps {args.steps}, deliveries {len(latencies)}/{expected}")
    print(
        f"commit -> received: p50 {statistics.median(latencies):.1f} ms, "
        f"p99 {percentile(latencies, 0.99):.1f} ms, max {max(latencies):.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--watchers", type=int, default=100)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between steps")
    parser.add_argument(
        "--sessions", type=int, default=1, help="logged-in users the watchers are spread over"
    )
    args = parser.parse_args()
    if settings.EMBEDDED:
        sys.exit("set REDIS_URL (and DATABASE_URL): this measures the production topology")
    call_command("migrate", verbosity=0)

    cookies = []
    for i in range(max(1, args.sessions)):
        name = "bench-watcher" if i == 0 else f"bench-watcher-{i}"
        user, _ = get_user_model().objects.get_or_create(username=name)
        user.groups.add(Group.objects.get(name="viewer"))
        client = Client()
        client.force_login(user)
        cookies.append(f"sessionid={client.cookies['sessionid'].value}")
    agent = get_agent("refund-desk")
    run = engine.launch(
        agent=agent, input={"order_id": 1, "reason": "bench"}, provider="scripted"
    )  # nobody consumes the queue here: the run stays queued while we append to it

    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
         "agentops.asgi:application"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    sys.exit("daphne did not start")
                time.sleep(0.2)
        print(f"cores={os.cpu_count()}, load={os.getloadavg()}, sessions={len(cookies)}")
        asyncio.run(bench(args, f"http://127.0.0.1:{port}", cookies, run))
        print(f"load after: {os.getloadavg()} (shared 2-core machine, other jobs running)")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        run.cancel(reason="benchmark finished")


if __name__ == "__main__":
    main()
