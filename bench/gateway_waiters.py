"""Gateway waiters: what N external calls waiting for a person cost one daphne, and how fast a
decision reaches its agent.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentops_gw \
    REDIS_URL=redis://127.0.0.1:6379/11 \
        uv run python bench/gateway_waiters.py                 # 300 waiters, a few minutes

    ... bench/gateway_waiters.py --waiters 10000 --decisions 200 --stack-kb 128 --ulimit
    ... bench/gateway_waiters.py --code /tmp/agentops-before   # the same, against another
                                                                # checkout (git archive <ref>)

Starts a real daphne (agentops.asgi) on a free 127.0.0.1 port, serving --code (this checkout
by default) with this checkout's interpreter. Then, in one sitting:

1. idle: --probes sequential requests of a person (GET /api/runs?limit=20 with an API token,
   GET /runs/ with a session): p50 / p99;
2. N waiters: N gated calls (an external agent whose rule gates `bench_op`), each waited on by
   the real `agentops_client` (Session.wait_for, its long-poll) in a thread of this process;
   once they all wait: the same probes again, the database connections daphne holds
   (pg_stat_activity, by application_name) and daphne's threads and memory (/proc);
3. decisions: --decisions calls approved one at a time over the approvals API (as an approver
   would); decision -> agent unblocked, measured from the decision's HTTP answer (the decision
   is committed before it) and from its request;
4. the rest: the sessions fail, which cancels what still waits; every waiter must end.

Prints the figures and the machine's load (cores, load average, daphne's CPU seconds per
phase). Stops daphne by its PID. Bounded: every request has a timeout, and the run stops
with what it has after --max-seconds.
"""

import argparse
import concurrent.futures
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")

import django  # noqa: E402

django.setup()

from agentops_client import AgentopsClient, AgentopsError  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.contrib.auth.models import Group  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402

from accounts.models import ApiToken  # noqa: E402
from gateway.models import ExternalAgent  # noqa: E402

APP_NAME = "agentops-gw-bench-daphne"
TOOL = "bench_op"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(values: list[float]) -> str:
    if not values:
        return "no samples"
    return (
        f"p50 {statistics.median(values):.1f} ms, p99 {pct(values, 0.99):.1f} ms, "
        f"max {max(values):.1f} ms (n={len(values)})"
    )


class Daphne:
    def __init__(self, code: Path, port: int):
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "AGENTOPS_NOTIFY_EMAIL": "false"}
        env["PYTHONPATH"] = str(code)
        # Its connections carry a name of their own in pg_stat_activity.
        sep = "&" if "?" in env["DATABASE_URL"] else "?"
        env["DATABASE_URL"] += f"{sep}application_name={APP_NAME}"
        (ROOT / "var").mkdir(exist_ok=True)
        self.log = open(ROOT / "var" / "gateway_waiters_daphne.log", "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
             "agentops.asgi:application"],
            cwd=code, env=env, stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    sys.exit("daphne did not start (see var/gateway_waiters_daphne.log)")
                time.sleep(0.2)

    def status(self) -> dict:
        """Threads, resident memory and CPU seconds of the daphne process."""
        fields = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            fields[key] = value.strip()
        stat = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return {
            "threads": int(fields["Threads"]),
            "rss_mb": int(fields["VmRSS"].split()[0]) / 1024,
            "cpu_s": (int(stat[11]) + int(stat[12])) / ticks,
        }

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def daphne_connections() -> tuple[int, int]:
    """(open, in use) database connections of the daphne process."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), count(*) FILTER (WHERE state <> 'idle') FROM pg_stat_activity "
            "WHERE application_name = %s",
            [APP_NAME],
        )
        return cursor.fetchone()


class Person:
    """Requests a person makes: the user API with a token, a page with a session."""

    def __init__(self, base: str, timeout: float):
        self.base, self.timeout = base, timeout
        viewer, _ = get_user_model().objects.get_or_create(username="bench-gw-viewer")
        viewer.groups.add(Group.objects.get(name="viewer"))
        approver, _ = get_user_model().objects.get_or_create(username="bench-gw-approver")
        approver.groups.add(Group.objects.get(name="approver"))
        self.viewer_token = ApiToken.issue(viewer, "bench")[1]
        self.approver_token = ApiToken.issue(approver, "bench")[1]
        client = Client()
        client.force_login(viewer)
        self.cookie = f"sessionid={client.cookies['sessionid'].value}"
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def _request(self, path: str, *, token: str = "", cookie: str = "", body=None, method="GET"):
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if cookie:
            headers["Cookie"] = cookie
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data, headers, method=method)
        with self.opener.open(request, timeout=self.timeout) as response:
            return (
                json.loads(response.read()) if "json" in response.headers["Content-Type"] else None
            )

    def probe(self, count: int) -> tuple[list[float], list[float], int]:
        """(API latencies, page latencies, errors), ms."""
        api, page, errors = [], [], 0
        for _ in range(count):
            for path, kw, into in (
                ("/api/runs?limit=20", {"token": self.viewer_token}, api),
                ("/runs/", {"cookie": self.cookie}, page),
            ):
                started = time.perf_counter()
                try:
                    self._request(path, **kw)
                    into.append((time.perf_counter() - started) * 1000)
                except (urllib.error.URLError, TimeoutError, OSError):
                    errors += 1
        return api, page, errors

    def approve(self, approval_id: str) -> tuple[float, float]:
        """(time.time() the decision was sent, time.time() it was answered)."""
        shown = self._request(f"/api/approvals/{approval_id}", token=self.approver_token)
        sent = time.time()
        self._request(
            f"/api/approvals/{approval_id}/decision",
            token=self.approver_token,
            method="POST",
            body={"decision": "approve", "shown_args_hash": shown["arguments_hash"]},
        )
        return sent, time.time()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--waiters", type=int, default=300)
    parser.add_argument("--decisions", type=int, default=50)
    parser.add_argument("--probes", type=int, default=100, help="requests per probe phase")
    parser.add_argument("--per-session", type=int, default=500, help="waiting calls per session")
    parser.add_argument("--submitters", type=int, default=8, help="threads submitting calls")
    parser.add_argument("--stack-kb", type=int, default=256, help="stack of each waiter thread")
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout daphne serves")
    parser.add_argument("--max-seconds", type=float, default=1800)
    parser.add_argument(
        "--probe-timeout", type=float, default=60, help="a person's request gives up after"
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=2,
        help="seconds between the last waiter's arrival and the idle measurement (their "
        "first reads; more than 30 also covers their first asking again)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="py-spy daphne while the waiters wait (collapsed stacks to this file; needs py-spy "
        "on PATH: uv run --with py-spy ...)",
    )
    parser.add_argument(
        "--ulimit", action="store_true", help="raise this process's open-files limit to its max"
    )
    args = parser.parse_args()
    if settings.EMBEDDED or not settings.IS_POSTGRES:
        sys.exit("set DATABASE_URL (Postgres) and REDIS_URL: this measures the production topology")
    if args.ulimit:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    needed = args.waiters + 100
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < needed:
        sys.exit(f"open-files limit below {needed}: raise it (ulimit -n, or --ulimit)")
    started_at = time.monotonic()
    call_command("migrate", verbosity=0)
    agent, _ = ExternalAgent.objects.get_or_create(slug="bench-waiters", defaults={"title": "b"})
    agent.gates = {"always_gate": [TOOL]}
    agent.limits = {"max_steps": 10**6, "max_seconds": 86_400}
    agent.save()
    token = agent.issue_token()

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    daphne = Daphne(args.code.resolve(), port)
    person = Person(base, args.probe_timeout)
    cores = os.cpu_count()
    print(f"code {args.code.resolve()}  cores={cores}  load={os.getloadavg()}")
    print(f"DATABASE_POOL_MAX={os.environ.get('DATABASE_POOL_MAX', 20)}  waiters={args.waiters}")
    try:
        person.probe(5)  # warm-up
        cpu0 = daphne.status()["cpu_s"]
        api0, page0, err0 = person.probe(args.probes)
        print(f"\n[idle] user API  {summary(api0)}; errors {err0}")
        print(f"[idle] page      {summary(page0)}")
        print(f"[idle] daphne {daphne.status()}, db connections (open, in use) "
              f"{daphne_connections()}, cpu {daphne.status()['cpu_s'] - cpu0:.1f}s")  # fmt: skip

        # --- waiters -------------------------------------------------------------------------
        client = AgentopsClient(base, token, request_timeout=60)
        sessions = [
            client.session(f"bench {i}")
            for i in range((args.waiters + args.per_session - 1) // args.per_session)
        ]
        t0 = time.monotonic()

        def submit(n: int) -> dict:
            return sessions[n // args.per_session].submit(TOOL, {"n": n})

        with concurrent.futures.ThreadPoolExecutor(args.submitters) as pool:
            calls = list(pool.map(submit, range(args.waiters)))
        assert all(c["status"] == "pending" for c in calls), calls[:3]
        print(f"\n[submit] {args.waiters} gated calls in {time.monotonic() - t0:.1f}s")

        unblocked: dict[str, float] = {}
        outcome: dict[str, str] = {}
        waiting = threading.Semaphore(0)

        def wait(call: dict) -> None:
            session = sessions[0]
            waiting.release()
            try:
                decision = session.wait_for(call["call"], timeout=args.max_seconds)
                unblocked[call["call"]] = time.time()
                outcome[call["call"]] = decision.status
            except AgentopsError as exc:
                outcome[call["call"]] = f"error {exc.status}"

        threading.stack_size(args.stack_kb * 1024)
        threads = [threading.Thread(target=wait, args=(c,), daemon=True) for c in calls]
        for thread in threads:
            thread.start()
        for _ in threads:
            waiting.acquire()
        # Every waiter has sent its long-poll once daphne stops taking new ones in: wait for
        # daphne's accepted connections to reach the count (bounded).
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and established(port) < args.waiters:
            time.sleep(0.5)
        time.sleep(args.settle)  # their first reads done
        print(f"[waiting] {established(port)} connections open to daphne; db connections "
              f"(open, in use) {daphne_connections()}; daphne {daphne.status()}")  # fmt: skip
        quiet = daphne.status()["cpu_s"]
        if args.profile:
            # Sampled over the same 10 s: where an idle daphne spends its CPU.
            subprocess.run(
                ["py-spy", "record", "--pid", str(daphne.proc.pid), "--duration", "10",
                 "--format", "raw", "--nonblocking", "--output", str(args.profile)],
                check=False, stdout=subprocess.DEVNULL, timeout=60,
            )  # fmt: skip
        else:
            time.sleep(10)
        busy = (daphne.status()["cpu_s"] - quiet) / 10 * 100
        print(f"[waiting] daphne CPU, no person asking: {busy:.0f} % of a core over 10 s")
        cpu1 = daphne.status()["cpu_s"]
        api1, page1, err1 = person.probe(args.probes)
        print(f"[waiting] user API  {summary(api1)}; errors {err1}")
        print(f"[waiting] page      {summary(page1)}")
        samples = [daphne_connections() for _ in range(5)]
        print(f"[waiting] db connections (open, in use) sampled: {samples}; "
              f"cpu during probes {daphne.status()['cpu_s'] - cpu1:.1f}s")  # fmt: skip
        p99_0 = pct(api0, 0.99)
        print(f"[waiting] user API p99 vs idle: {pct(api1, 0.99) / p99_0 * 100 - 100:+.0f} %")

        # --- decisions -----------------------------------------------------------------------
        from_answer, from_request = [], []
        for call in calls[: args.decisions]:
            if time.monotonic() - started_at > args.max_seconds:
                break
            try:
                sent, answered = person.approve(call["approval"])
            except (urllib.error.URLError, TimeoutError, OSError) as exc:
                print(f"[decide] decision failed: {exc}")
                continue
            limit = time.monotonic() + 30
            while call["call"] not in unblocked and time.monotonic() < limit:
                time.sleep(0.0005)
            if call["call"] in unblocked:
                from_answer.append((unblocked[call["call"]] - answered) * 1000)
                from_request.append((unblocked[call["call"]] - sent) * 1000)
        print(f"\n[decide] decision answered -> agent unblocked: {summary(from_answer)}")
        print(f"[decide] decision sent     -> agent unblocked: {summary(from_request)}")
        missing = args.decisions - len(from_answer)
        if missing:
            print(f"[decide] {missing} agents not unblocked within 30 s")
    finally:
        for session in locals().get("sessions", []):
            try:
                session.close("failed", detail="benchmark finished")
            except AgentopsError as exc:
                print(f"closing {session.id}: {exc}")
        for thread in locals().get("threads", []):
            thread.join(timeout=max(1.0, args.max_seconds - (time.monotonic() - started_at)))
        statuses = {}
        for status in locals().get("outcome", {}).values():
            statuses[status] = statuses.get(status, 0) + 1
        print(f"\n[end] waiters' outcomes: {statuses}")
        print(f"[end] load after: {os.getloadavg()}; daphne {daphne.status()}")
        daphne.stop()


def established(port: int) -> int:
    """TCP connections established to `port` on this machine (from /proc/net/tcp)."""
    wanted = f":{port:04X}"
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if parts[1].endswith(wanted) and parts[3] == "01":
                count += 1
    return count


if __name__ == "__main__":
    main()
