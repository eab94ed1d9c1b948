"""Reconnect storm: N WebSocket connections opened at the same moment to one daphne, as the
browsers of a fleet do after a deploy or a network blip.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentops_bench \\
    REDIS_URL=redis://127.0.0.1:6379/14 \\
        uv run python bench/reconnect_storm.py --sockets 100 1000

Migrates, signs in --sessions users (viewers: a session in the database, as a sign-in makes),
and starts `daphne agentops.asgi:application` (the production command, DEBUG=false) on a free
127.0.0.1 port against that Postgres and Redis. For each figure given to --sockets, after a
pause: opens that many sockets at once on --stream (default the approvals stream, which every
page opens for the navigation's pending count; the sessions taken in turn), each with the
session cookie and the page's Origin, and waits up to --wait seconds.

A socket is *accepted* once its handshake answered 101, and *live* once it has received the
stream's current state (the approvals stream sends it on every connect; on the dashboard stream,
which sends nothing at connect, accepted counts as live). Prints, per storm: accepted and live
counts, refused handshakes (closed before an answer, as daphne does after
`--websocket_connect_timeout`), the time from the storm's start to the p50/p99/last socket
live, the load average and daphne's CPU. Exits 1 when a socket is not live at the end, so
`--sockets 1000` is a pass/fail check too. Stops daphne by its PID.
"""

import argparse
import asyncio
import os
import subprocess
import sys
import threading
import time
from http.client import HTTPConnection
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
os.environ.setdefault("DEBUG", "false")  # production figures; the server inherits it
os.environ.setdefault("SECRET_KEY", "bench-only-not-a-secret")
os.environ.setdefault("SECURE_SSL_REDIRECT", "false")
os.environ.setdefault("ALLOWED_HOSTS", "127.0.0.1")

from bench.common import cpu_seconds, free_port, machine, percentile  # noqa: E402

STREAMS = {"approvals": "/ws/approvals/", "dashboard": "/ws/runs/"}


def sign_in(sessions: int) -> list[str]:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.core.management import call_command
    from django.test import Client

    call_command("migrate", verbosity=0)
    cookies = []
    for i in range(sessions):
        user, _ = get_user_model().objects.get_or_create(username=f"bench-storm-{i}")
        user.groups.add(Group.objects.get(name="viewer"))
        client = Client()
        client.force_login(user)
        cookies.append(f"sessionid={client.cookies['sessionid'].value}")
    return cookies


def start_daphne(port: int, extra: list[str]) -> subprocess.Popen:
    runner = [os.environ["STORM_RUNNER"]] if os.environ.get("STORM_RUNNER") else ["-m", "daphne"]
    command = [sys.executable, *runner, "-b", "127.0.0.1", "-p", str(port), *extra]
    proc = subprocess.Popen(
        [*command, "agentops.asgi:application"],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "LOG_LEVEL": "WARNING"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    proc.lines = lines  # type: ignore[attr-defined]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"daphne exited with {proc.returncode}:\n{''.join(lines)}")
        try:
            conn = HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                conn.close()
                return proc
        except OSError:
            time.sleep(0.3)
    proc.kill()
    sys.exit("daphne did not answer /healthz within 120 s")


class Socket:
    accepted: float | None = None
    live: float | None = None
    failure: str = ""


async def one(
    url: str, cookie: str, origin: str, sock: Socket, start: asyncio.Event, t0: list[float],
    wait: float, needs_state: bool, hold: asyncio.Event,
) -> None:  # fmt: skip
    from websockets.asyncio.client import connect

    await start.wait()
    try:
        async with connect(
            url,
            additional_headers={"Cookie": cookie},
            origin=origin,
            open_timeout=wait,
            close_timeout=1,
            max_queue=None,
        ) as ws:
            sock.accepted = time.perf_counter() - t0[0]
            if needs_state:
                await asyncio.wait_for(ws.recv(), timeout=max(0.1, wait - sock.accepted))
            sock.live = time.perf_counter() - t0[0]
            await hold.wait()  # every socket stays open until the storm is over
    except Exception as exc:
        sock.failure = type(exc).__name__ + (f": {exc}"[:80] if str(exc) else "")


async def storm(base: str, path: str, cookies: list[str], n: int, wait: float) -> list[Socket]:
    url = base.replace("http", "ws") + path
    sockets = [Socket() for _ in range(n)]
    start, hold = asyncio.Event(), asyncio.Event()
    t0 = [0.0]
    needs_state = path == STREAMS["approvals"]
    tasks = [
        asyncio.create_task(
            one(url, cookies[i % len(cookies)], base, s, start, t0, wait, needs_state, hold)
        )
        for i, s in enumerate(sockets)
    ]
    await asyncio.sleep(0.2)  # every task is waiting on the start
    t0[0] = time.perf_counter()
    start.set()
    deadline = t0[0] + wait
    while time.perf_counter() < deadline:
        if all(s.live is not None or s.failure for s in sockets):
            break
        await asyncio.sleep(0.05)
    hold.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    return sockets


def report(n: int, sockets: list[Socket], server_cpu: float, wall: float) -> bool:
    accepted = sum(s.accepted is not None for s in sockets)
    live = [s.live for s in sockets if s.live is not None]
    failures: dict[str, int] = {}
    for s in sockets:
        if s.live is None:
            key = s.failure or "not live in time"
            failures[key] = failures.get(key, 0) + 1
    line = f"{n:>5} at once: accepted {accepted}/{n}, live {len(live)}/{n}"
    if live:
        line += (
            f"; live after p50 {percentile(live, 0.5):.2f} s, p99 {percentile(live, 0.99):.2f} s,"
            f" last {max(live):.2f} s"
        )
    print(line + f"; daphne CPU {server_cpu:.1f} s over {wall:.1f} s", flush=True)
    for kind, count in sorted(failures.items(), key=lambda kv: -kv[1]):
        print(f"        {count} x {kind}", flush=True)
    return len(live) == n


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sockets", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--stream", choices=sorted(STREAMS), default="approvals")
    parser.add_argument("--sessions", type=int, default=20, help="signed-in users, in turn")
    parser.add_argument("--wait", type=float, default=30.0, help="seconds a storm may take")
    parser.add_argument("--pause", type=float, default=3.0, help="seconds between storms")
    parser.add_argument(
        "--daphne-arg", action="append", default=[], help="passed to daphne (repeat)"
    )
    args = parser.parse_args()

    import django

    django.setup()
    from django.conf import settings

    if settings.EMBEDDED or not settings.IS_POSTGRES:
        sys.exit("set DATABASE_URL (Postgres) and REDIS_URL: this measures the production topology")
    print(f"before: {machine()}", flush=True)
    cookies = sign_in(max(1, args.sessions))
    port = free_port()
    daphne = start_daphne(port, args.daphne_arg)
    base = f"http://127.0.0.1:{port}"
    every_live = True
    try:
        print(
            f"daphne pid {daphne.pid} on {base}; {args.stream} stream, {len(cookies)} sessions",
            flush=True,
        )
        for n in args.sockets:
            time.sleep(args.pause)
            cpu = cpu_seconds(daphne.pid)
            started = time.perf_counter()
            sockets = asyncio.run(storm(base, STREAMS[args.stream], cookies, n, args.wait))
            wall = time.perf_counter() - started
            every_live &= report(n, sockets, cpu_seconds(daphne.pid) - cpu, wall)
            print(f"        {machine(daphne=daphne.pid)}", flush=True)
    finally:
        daphne.terminate()
        try:
            daphne.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daphne.kill()
    errors = [line for line in daphne.lines if "Traceback" in line or "ERROR" in line]
    if errors:
        print(f"daphne logged {len(errors)} error lines; first: {errors[0].strip()}")
    sys.exit(0 if every_live else 1)


if __name__ == "__main__":
    main()
