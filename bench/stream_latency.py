"""Streaming model text: first streamed token -> browser, and what a long answer costs in
WebSocket messages, on the production topology (Redis between the worker and daphne).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentops_bench \
    REDIS_URL=redis://127.0.0.1:6379/14 \
        uv run python bench/stream_latency.py --watchers 5 --answers 10 --chars 4000

Starts a real daphne (agentops.asgi) and the fake Messages API, both on free 127.0.0.1
ports, opens N authenticated WebSocket watchers on one run's stream, then makes model calls
the way the engine does for an agent with stream_text: the Anthropic provider through the
SDK's streaming API (`stream_delay` seconds between pieces of `--chunk` characters), its
text handed to runs/engine/drafts.py's Draft, which publishes throttled drafts. Each
watcher records when each draft arrives. Printed: first token latency (the provider got the
first text delta -> the watcher received its draft) p50/p99, drafts per answer, drafts per
second while an answer is written. Bounded by --answers; stops daphne and the fake server.
"""

import argparse
import asyncio
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
from django.test import Client  # noqa: E402
from websockets.asyncio.client import connect  # noqa: E402

from agentkit.agents import get_agent  # noqa: E402
from agentkit.llm import LLMRequest  # noqa: E402
from agentkit.llm.anthropic import AnthropicProvider  # noqa: E402
from runs import engine  # noqa: E402
from runs.engine import drafts  # noqa: E402
from tests.support.fake_messages_api import FakeMessagesServer, reply, text  # noqa: E402

DRAFT_RE = re.compile(r'data-draft-seq="(\d+)"')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def watch(url: str, cookie: str, origin: str, arrivals: list, ready: asyncio.Event, stop):
    """Every draft message: (seq, received at)."""
    async with connect(url, additional_headers={"Cookie": cookie}, origin=origin) as ws:
        ready.set()
        while not stop.is_set():
            try:
                message = await asyncio.wait_for(ws.recv(), timeout=0.5)
            except TimeoutError:
                continue
            match = DRAFT_RE.search(message)
            if match:
                arrivals.append((int(match.group(1)), time.time()))


def answer(provider: AnthropicProvider, run_id, seq: int) -> tuple[float, float, float, int]:
    """One streamed model call as the engine makes it: (first text delta at, ended at,
    started at, drafts published)."""
    draft = drafts.Draft(run_id, seq)
    first: list[float] = []

    def on_text(piece: str) -> None:
        if not first:
            first.append(time.time())
        draft(piece)

    request = LLMRequest(
        model="claude-haiku-4-5",
        system="",
        messages=[{"role": "user", "content": "Write a long report."}],
        tools=[],
    )
    started = time.time()
    provider.complete(request, on_text=on_text)
    draft.finish()
    return first[0], time.time(), started, draft.sent


async def bench(args, base: str, cookie: str, run, provider: AnthropicProvider, fake) -> None:
    url = base.replace("http", "ws") + f"/ws/runs/{run.pk}/?after={run.last_seq}"
    stop = asyncio.Event()
    per_watcher: list[list] = [[] for _ in range(args.watchers)]
    readies = [asyncio.Event() for _ in range(args.watchers)]
    tasks = [
        asyncio.create_task(watch(url, cookie, base, per_watcher[i], readies[i], stop))
        for i in range(args.watchers)
    ]
    await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), timeout=60)
    await asyncio.sleep(1.0)  # every consumer has joined its feed
    body = ("The orders table holds one row per order. " * (args.chars // 42 + 1))[: args.chars]
    calls = []
    for i in range(args.answers):
        fake.push(reply([text(body)]))
        seq = run.last_seq + 1 + i  # a seq of its own per answer, as successive model steps
        calls.append((seq, *await asyncio.to_thread(answer, provider, run.pk, seq)))
        await asyncio.sleep(0.3)
    await asyncio.sleep(1.0)  # the last drafts arrive
    stop.set()
    await asyncio.gather(*tasks)

    first_latencies, counts, rates, durations, published = [], [], [], [], []
    # The first answer warms up the web process (templates, its feed's render): left out.
    for seq, first_text, ended, started, sent in calls[1:]:
        durations.append(ended - started)
        published.append(sent)
        for arrivals in per_watcher:
            times = [at for s, at in arrivals if s == seq]
            if not times:
                continue
            first_latencies.append((times[0] - first_text) * 1000)
            counts.append(len(times))
            rates.append(len(times) / max(1e-6, ended - first_text))
    print(
        f"watchers {args.watchers}, answers {args.answers - 1} (+1 warm-up) of {args.chars} chars, "
        f"{args.chunk} chars per delta every {args.delay * 1000:.0f} ms, "
        f"draft interval {drafts.DRAFT_INTERVAL_SECONDS * 1000:.0f} ms"
    )
    print(
        f"answer written in: median {statistics.median(durations):.2f} s; "
        f"text deltas per answer {-(-args.chars // args.chunk)}"
    )
    print(
        f"first token -> browser: p50 {statistics.median(first_latencies):.1f} ms, "
        f"p99 {percentile(first_latencies, 0.99):.1f} ms, max {max(first_latencies):.1f} ms "
        f"({len(first_latencies)} watcher-answers)"
    )
    print(
        f"WebSocket messages per answer per watcher: median {statistics.median(counts):.0f}, "
        f"max {max(counts)} (published {statistics.median(published):.0f}); "
        f"per second while writing: median {statistics.median(rates):.2f}, max {max(rates):.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--watchers", type=int, default=5)
    parser.add_argument("--answers", type=int, default=11, help="the first one is a warm-up")
    parser.add_argument("--chars", type=int, default=4000, help="characters per answer")
    parser.add_argument("--chunk", type=int, default=12, help="characters per text delta")
    parser.add_argument("--delay", type=float, default=0.02, help="seconds between deltas")
    args = parser.parse_args()
    if settings.EMBEDDED:
        sys.exit("set REDIS_URL (and DATABASE_URL): the worker and daphne are two processes")
    call_command("migrate", verbosity=0)

    user, _ = get_user_model().objects.get_or_create(username="bench-watcher")
    user.groups.add(Group.objects.get(name="viewer"))
    client = Client()
    client.force_login(user)
    cookie = f"sessionid={client.cookies['sessionid'].value}"
    agent = get_agent("order-briefing")
    run = engine.launch(
        agent=agent, input={"order_id": 1, "audience": "bench"}, provider="scripted"
    )  # nobody consumes the queue here: the run stays queued while we draft for it

    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
         "agentops.asgi:application"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    fake = FakeMessagesServer(latency=0.05, stream_delay=args.delay, stream_chunk=args.chunk)
    fake.start()
    provider = AnthropicProvider(api_key="bench", base_url=fake.base_url, timeout=120)
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
        print(f"cores={os.cpu_count()}, load={os.getloadavg()}")
        asyncio.run(bench(args, f"http://127.0.0.1:{port}", cookie, run, provider, fake))
        print(f"load after: {os.getloadavg()} (shared 2-core machine, other jobs running)")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        fake.stop()
        run.cancel(reason="benchmark finished")


if __name__ == "__main__":
    main()
