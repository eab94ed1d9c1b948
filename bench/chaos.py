"""Chaos suite: the production topology under faults, then the exactly-once checks.

    uv run python bench/chaos.py                      # defaults: 20 runs, a few of each fault
    uv run python bench/chaos.py --runs 200 --pg-restarts 8 --redis-restarts 2 --kills 30

Everything it needs it starts itself, on free ports of 127.0.0.1, in a temporary directory,
and stops by PID when it ends (also on Ctrl-C or an error): a Postgres cluster (initdb +
pg_ctl, as the `postgres` OS user when run as root), a redis-server, one daphne, two threaded
Celery workers and beat, all with DEBUG=false and a short lease (--lease). It never touches
the shared Postgres or Redis. The agent and its slow tools with side effects are in
bench/chaos_app.py (effects land in a SQLite file outside the database under test).

While it launches --runs runs over the API (spread over --seconds, each retried with one
Idempotency-Key until the API answers 201), approves every gated call and answers every
"outcome unknown" question from the effects file (the truth), and --watchers WebSocket clients
follow long runs (reconnecting with `?after=<last seq>`), it injects faults one at a time,
evenly spaced, in a shuffled order: kill -9 of a worker (restarted 1 s later, as a supervisor
would), `pg_ctl restart` (-m immediate and -m fast in turn), Redis SHUTDOWN NOSAVE (restarted
after --redis-down seconds), kill -9 of daphne with the WebSocket clients connected (restarted
1 s later).

After each fault a canary run is launched; the fault is recovered when the API answers again,
the canary has finished and (for a worker kill) every run the dead worker held has moved on.
A worker kill aims at the worker that holds the most runs, waiting (briefly) for one to hold
any: a kill that hits no run exercises nothing and is a failure. During each Redis outage a
run is launched whose enqueue is lost: the sweep must send it again within the bound.

Then the attacks of issue 28, each a failure unless refused as it should be: a signed webhook
replayed within the window (one run), a gate configuration with a typo (`manage.py check`
refuses it), TRUNCATE of the timeline (refused by the database), a login brute force (locked
out, even the right password), a lone UTF-16 surrogate in a JSON body (4xx, never 5xx).

Then it waits (at most --drain seconds) for every run to finish and checks: runs launched /
acknowledged (201) / found in the database, terminal, stuck (active with no activity for 2 x
lease), stalls (the longest a run went without a step, waits for a person aside, against
--stall-bound: 2 x lease plus the longest outage by default), duplicate effects per idempotency
key and per logical call, effects missing from completed runs, seq gaps and hash chains, HTTP
5xx during and after each fault, hung requests (no answer within the client's timeout), time to
recover, the worst time to terminal after the last fault, and that each WebSocket client saw
exactly the run's seqs 1..n once. Exits 1 on any of: a launch that never got its 201, a launch
that made two runs, a lost run, a run still waiting for a person or active at the end, a stall
beyond the bound, a duplicate effect, a gap, a 5xx after recovery, a hung request, a fault not
recovered, a worker kill that hit no run, an attack not refused, or a WebSocket client that
disagrees with the database.

The stall bound is a figure for a machine that gives the processes the CPU they ask for. A
sampler process measures how much slower than its CPU time a fixed CPU-bound loop runs (1.0:
a core whenever it wanted one; 10: it waited for a core nine times as long as it ran) with
the load average; each stall is also held against the bound times the starvation measured
during that stall, and both figures are printed: a stall beyond the bound but within the
scaled one is reported as a bound this machine could not reach and why, not as a failure.
After the faults and at the end it prints the pool statistics of daphne (GET /-/pool) and of
each worker (psycopg_pool's get_stats(): size, idle, checked out, waiting, lost, errors); a
connection still checked out of daphne's pool once the requests are over is a failure (a
leak: issue 39).

Waits for a process (daphne at start and after its restart) are bounded by the process
itself: the suite waits while it is alive and fails as soon as it exits, up to --start-cap
seconds, so a loaded 2-core machine slows it down instead of aborting it.
"""

import argparse
import atexit
import contextlib
import itertools
import json
import os
import random
import re
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

AGENT = "chaos-loop"
ATTACK: dict[str, str] = {}  # what prepare() made for the attacks

from tests.support import effect_ledger  # noqa: E402
from tests.support.http_clients import HUNG, Client, Watcher, wait_http  # noqa: E402
from tests.support.supervisor import Supervisor, free_port, wait_port  # noqa: E402
from tests.support.topology_setup import session_for  # noqa: E402


# --- processes ---------------------------------------------------------------------------------
def pg_bindir() -> Path:
    try:
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True)
        if (Path(out.stdout.strip()) / "initdb").exists():
            return Path(out.stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        pass
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        raise SystemExit("no initdb found (install PostgreSQL server binaries)")
    return found[-1].parent


class Services(Supervisor):
    """Every process this run starts, by PID (tests/support/supervisor.py), and its own
    Postgres cluster."""

    def __init__(self, tmp: Path):
        super().__init__(tmp)
        self.pg_data = tmp / "pg"
        self.pg_sock = tmp / "pgsock"
        self.pg_bin = pg_bindir()
        self.pg_port = free_port()
        self.redis_port = free_port()
        self.web_port = free_port()
        self.as_root = os.geteuid() == 0
        self.pg_started = False

    # Postgres: a cluster of our own, on a private port, owned by the postgres OS user.
    def _pg(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [str(self.pg_bin / argv[0]), *argv[1:]]
        if self.as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(
            cmd, cwd=self.tmp, capture_output=True, text=True, check=check, timeout=120
        )

    def start_postgres(self) -> None:
        for d in (self.pg_data, self.pg_sock):
            d.mkdir(mode=0o700)
            if self.as_root:
                shutil.chown(d, "postgres", "postgres")
        if self.as_root:
            shutil.chown(self.tmp, "postgres")  # pg_ctl's log file and cwd
        self._pg("initdb", "-D", str(self.pg_data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        opts = (
            f"-p {self.pg_port} -k {self.pg_sock} -c listen_addresses=127.0.0.1 "
            "-c max_connections=200 -c fsync=off"
        )
        self._pg(
            "pg_ctl", "-D", str(self.pg_data), "-l", str(self.tmp / "pg.log"),
            "-o", opts, "-w", "-t", "60", "start",
        )  # fmt: skip
        self.pg_started = True
        import psycopg

        with psycopg.connect(
            f"host=127.0.0.1 port={self.pg_port} user=postgres dbname=postgres", autocommit=True
        ) as conn:
            conn.execute("create database agentops_chaos")

    def restart_postgres(self, mode: str) -> None:
        # -l again: without it the new postmaster writes to pg_ctl's stdout, our pipe.
        self._pg(
            "pg_ctl", "-D", str(self.pg_data), "-l", str(self.tmp / "pg.log"),
            "-m", mode, "-w", "-t", "60", "restart",
        )  # fmt: skip

    def stop_postgres(self) -> None:
        if not self.pg_started:
            return
        result = self._pg(
            "pg_ctl", "-D", str(self.pg_data), "-m", "immediate", "-w", "stop", check=False
        )
        pidfile = self.pg_data / "postmaster.pid"
        if result.returncode != 0 and pidfile.exists():
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pidfile.read_text().split()[0]), signal.SIGKILL)
        self.pg_started = False

    def stop_all(self) -> None:
        super().stop_all()
        self.stop_postgres()


# --- the suite ----------------------------------------------------------------------------------
@dataclass
class Fault:
    kind: str
    at: float  # monotonic, when injected
    restored: float = 0.0  # the service is back (restarted / answering)
    api_back: float = 0.0
    canary_done: float = 0.0
    orphans_done: float = 0.0
    orphans: int = 0
    recovered: float = 0.0
    note: str = ""
    wall: float = field(default_factory=time.time)  # when injected, wall clock

    def recovery(self) -> float:
        parts = [self.api_back, self.canary_done]
        if self.kind.startswith("kill worker"):
            parts.append(self.orphans_done)
        return max(parts) if all(parts) else 0.0


@dataclass
class Launch:
    tag: str
    body: dict
    acknowledged: bool = False
    attempts: int = 0
    no_answer: int = 0
    in_progress: int = 0  # 409: an earlier attempt with the key still ran
    run_id: str = ""
    canary: bool = False
    lost_enqueue: bool = False  # launched while the broker was down


@dataclass
class State:
    launches: list[Launch] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    questions: dict[str, str] = field(default_factory=dict)  # approval id -> answer
    approved: set[str] = field(default_factory=set)
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)


class Chaos:
    def __init__(self, args, services: Services, client: Client, op: str, ap: str):
        self.args = args
        self.sv = services
        self.http = client
        self.op, self.ap = op, ap
        self.st = State()
        self.rng = random.Random(args.seed)
        self.effects_path = services.env["CHAOS_EFFECTS_DB"]
        self.tag_prefix = f"c{os.getpid()}"
        self.counter = itertools.count(1)

    # launching
    def launch(
        self, *, steps: int, gate: bool, canary: bool = False, lost: bool = False, timeout=120.0
    ) -> Launch:
        kind = "k" if canary else ("l" if lost else "r")
        tag = f"{self.tag_prefix}-{kind}{next(self.counter)}"
        launch = Launch(tag, {"agent": AGENT, "input": {"tag": tag, "steps": steps, "gate": gate}})
        launch.canary, launch.lost_enqueue = canary, lost
        self.st.launches.append(launch)
        deadline = time.monotonic() + timeout
        # One key for every attempt: a retry after a lost answer gets the first answer, and a
        # second run of one tag is a failure (check()).
        key = f"launch-{tag}"
        while time.monotonic() < deadline:
            launch.attempts += 1
            code, out = self.http.call("POST", "/api/runs", self.op, launch.body, key=key)
            if code == 201:
                launch.acknowledged, launch.run_id = True, out["id"]
                return launch
            if code in (0, HUNG):
                launch.no_answer += 1
            elif code == 409 and "in progress" in str(out.get("detail", "")):
                launch.in_progress += 1  # the first attempt still runs: ask again for its answer
            elif code < 500:
                self.st.errors.append(f"launch {tag}: {code} {out}")
                return launch
            time.sleep(0.5)
        return launch

    def launcher(self, t0: float) -> None:
        n = self.args.runs
        span = self.args.seconds * 0.8
        for i in range(n):
            wait = t0 + span * i / max(1, n) - time.monotonic()
            if wait > 0 and self.st.stop.wait(wait):
                return
            threading.Thread(
                target=self.launch,
                kwargs={"steps": self.rng.randint(1, 3), "gate": i % 2 == 0},
                daemon=True,
            ).start()

    # the people: approve every gated call, answer "did it happen?" with the truth
    def effect_happened(self, ref: str) -> bool:
        db = sqlite3.connect(self.effects_path, timeout=30)
        try:
            return db.execute("select 1 from effect where ref = ?", (ref,)).fetchone() is not None
        finally:
            db.close()

    def people(self) -> None:
        while not self.st.stop.is_set():
            code, page = self.http.call("GET", "/api/approvals?status=pending&limit=200", self.ap)
            for item in page.get("items", []) if code == 200 else []:
                if not item["can_decide"]:
                    continue
                if item["kind"] == "question":
                    ref = (item.get("arguments") or {}).get("ref", "")
                    answer = "happened" if self.effect_happened(ref) else "did_not_happen"
                    body = {"decision": "answer", "answer": answer}
                else:
                    body = {"decision": "approve"}
                code, _ = self.http.call(
                    "POST",
                    f"/api/approvals/{item['id']}/decision",
                    self.ap,
                    body,
                    key=f"decide-{item['id']}",
                )
                if code == 200:
                    if item["kind"] == "question":
                        self.st.questions[str(item["id"])] = body["answer"]
                    else:
                        self.st.approved.add(str(item["id"]))
            self.st.stop.wait(0.5)

    def prober(self) -> None:
        while not self.st.stop.is_set():
            self.http.call("GET", "/api/runs?limit=1", self.op)
            self.st.stop.wait(0.25)

    # faults
    def schedule(self) -> list[str]:
        a = self.args
        kinds = (
            ["pg"] * a.pg_restarts
            + ["redis"] * a.redis_restarts
            + ["kill"] * a.kills
            + ["daphne"] * a.daphne_kills
        )
        self.rng.shuffle(kinds)
        return kinds

    def inject(self, kind: str, index: int) -> Fault:
        sv = self.sv
        if kind == "pg":
            mode = ("immediate", "fast")[index % 2]
            fault = Fault(f"postgres restart -m {mode}", time.monotonic())
            sv.restart_postgres(mode)
        elif kind == "redis":
            fault = Fault("redis shutdown", time.monotonic())
            # Raw: redis-py waits and retries when the server drops the connection on it.
            with socket.create_connection(("127.0.0.1", sv.redis_port), timeout=5) as conn:
                conn.sendall(b"SHUTDOWN NOSAVE\r\n")
            try:
                sv.procs["redis"].wait(timeout=10)
            except subprocess.TimeoutExpired:
                sv.kill("redis")
            # A launch while the broker is down: the API answers 201 (the run is in
            # Postgres), its message is lost, and the sweep must send it again in time.
            lost = self.launch(steps=1, gate=False, lost=True, timeout=self.args.redis_down)
            fault.note = f"launch during outage: {'201' if lost.acknowledged else 'no 201'}"
            time.sleep(max(0.0, fault.at + self.args.redis_down - time.monotonic()))
            sv.spawn("redis")
            wait_port(sv.redis_port, 30)
        elif kind == "kill":
            name = self.busiest_worker()
            pid = sv.procs[name].pid
            fault = Fault(f"kill -9 worker {name}", time.monotonic())
            fault.kind = f"kill worker {name}"
            sv.kill(name)
            held = self.runs_held_by(pid)
            fault.orphans = len(held)
            fault.note = f"held {len(held)} runs"
            time.sleep(1)
            new = sv.spawn(name)
            threading.Thread(target=self.watch_orphans, args=(fault, held), daemon=True).start()
            # Back when the new worker consumes (bench/chaos_app.py marks it), not when its
            # process starts: on a loaded machine that takes a while, and runs wait meanwhile.
            ready = sv.tmp / f"ready-{new.pid}"
            deadline = time.monotonic() + self.args.start_cap
            while not ready.exists() and new.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            fault.note += f", worker ready after {time.monotonic() - fault.at:.1f} s"
        else:
            fault = Fault("kill -9 daphne", time.monotonic())
            sv.kill("daphne")
            time.sleep(1)
            sv.spawn("daphne")
            wait_port(sv.web_port, self.args.start_cap, proc=sv.procs["daphne"])
        fault.restored = time.monotonic()
        self.st.faults.append(fault)
        threading.Thread(target=self.watch_recovery, args=(fault,), daemon=True).start()
        return fault

    def busiest_worker(self, patience: float = 15.0) -> str:
        """The worker holding the most runs now; waits (at most `patience` s) for one to hold
        any, so the kill exercises a takeover. A kill that still hits none is a failure."""
        deadline = time.monotonic() + patience
        fed = False
        while True:
            held = {name: len(self.runs_held_by(self.sv.procs[name].pid)) for name in ("w1", "w2")}
            if max(held.values()) or time.monotonic() >= deadline:
                return max(sorted(held), key=lambda name: held[name])
            if not fed and time.monotonic() >= deadline - patience / 2:
                # Nothing running now: give the workers something to hold.
                for _ in range(2):
                    threading.Thread(
                        target=self.launch, kwargs={"steps": 3, "gate": False}, daemon=True
                    ).start()
                fed = True
            time.sleep(0.25)

    def runs_held_by(self, pid: int) -> dict[str, int]:
        from django.db import connection

        from runs.models import Run

        prefix = f"{socket.gethostname()}:{pid}:"
        connection.close()  # this thread's connection may predate a Postgres restart
        try:
            rows = Run.objects.filter(status="running", lease_owner__startswith=prefix)
            return dict(rows.values_list("pk", "last_seq"))
        finally:
            connection.close()

    def watch_orphans(self, fault: Fault, held: dict) -> None:
        from django.db import DatabaseError, connection

        from runs.models import Run

        deadline = fault.at + self.args.recover_timeout
        while held and time.monotonic() < deadline:
            try:
                rows = list(Run.objects.filter(pk__in=held).values_list("pk", "status", "last_seq"))
            except DatabaseError:  # a Postgres restart injected meanwhile
                connection.close()
                time.sleep(0.5)
                continue
            if all(status != "running" or seq > held[pk] for pk, status, seq in rows):
                fault.orphans_done = time.monotonic()
                break
            time.sleep(0.25)
        else:
            if not held:
                fault.orphans_done = time.monotonic()
        connection.close()

    def watch_recovery(self, fault: Fault) -> None:
        deadline = fault.at + self.args.recover_timeout
        while time.monotonic() < deadline:
            if self.http.call("GET", "/healthz")[0] == 200:
                fault.api_back = time.monotonic()
                break
            time.sleep(0.25)
        canary = self.launch(steps=1, gate=False, canary=True, timeout=deadline - time.monotonic())
        while canary.acknowledged and time.monotonic() < deadline:
            code, out = self.http.call("GET", f"/api/runs/{canary.run_id}", self.op)
            if code == 200 and out.get("status") in ("succeeded", "failed", "cancelled"):
                fault.canary_done = time.monotonic()
                break
            time.sleep(0.25)
        while time.monotonic() < deadline and not fault.recovery():
            time.sleep(0.25)
        fault.recovered = fault.recovery()

    def faults(self, t0: float) -> None:
        kinds = self.schedule()
        span = self.args.seconds
        for i, kind in enumerate(kinds):
            at = t0 + span * (i + 0.5) / max(1, len(kinds))
            if self.st.stop.wait(max(0.0, at - time.monotonic())):
                return
            fault = self.inject(kind, sum(1 for k in kinds[:i] if k == kind))
            print(f"  {fault.at - t0:6.1f} s  {fault.kind}  {fault.note}", flush=True)

    # the attacks of issue 28: each refused as it should be, or a failure
    def attacks(self) -> list[str]:
        failures: list[str] = []
        for name, attack in (
            ("webhook replayed in the window", self.attack_webhook_replay),
            ("gate configuration with a typo", self.attack_gate_typo),
            ("TRUNCATE of the timeline", self.attack_truncate),
            ("login brute force", self.attack_brute_force),
            ("lone UTF-16 surrogate in JSON", self.attack_surrogate),
        ):
            try:
                problem = attack()
            except Exception as exc:  # the attack itself broke: that is a failure too
                problem = f"{type(exc).__name__}: {exc}"
            print(f"  attack: {name}: {'refused' if not problem else 'NOT REFUSED: ' + problem}")
            if problem:
                failures.append(f"attack {name}: {problem}")
        return failures

    def attack_webhook_replay(self) -> str:
        from datetime import UTC, datetime

        from standardwebhooks.webhooks import Webhook

        tag = f"{self.tag_prefix}-w{next(self.counter)}"
        body = json.dumps({"input": {"tag": tag, "steps": 1, "gate": False}})
        now = datetime.now(UTC)
        headers = {
            "Content-Type": "application/json",
            "webhook-id": f"msg_{tag}",
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": Webhook(ATTACK["webhook_secret"]).sign(f"msg_{tag}", now, body),
        }
        codes, ids = [], set()
        for fresh_key in ("a", "a", "b", "c"):  # an unsigned key cannot make a copy new
            request = urllib.request.Request(
                f"{self.http.base}/api/hooks/{AGENT}",
                data=body.encode(),
                headers={**headers, "Idempotency-Key": fresh_key},
                method="POST",
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    codes.append(response.status)
                    ids.add(json.loads(response.read())["id"])
            except urllib.error.HTTPError as exc:
                codes.append(exc.code)
        if ids:
            launch = Launch(tag, {}, acknowledged=True, attempts=1, run_id=sorted(ids)[0])
            self.st.launches.append(launch)
        if codes != [201, 200, 200, 200] or len(ids) != 1:
            return f"answers {codes}, {len(ids)} run(s) launched"
        return ""

    def attack_gate_typo(self) -> str:
        code = "\n".join(
            [
                "import dataclasses",
                "import bench.chaos_app",
                "from agentkit.agents import GateRules, get_agent, register",
                f"chaos = get_agent({AGENT!r})",
                "register(dataclasses.replace(chaos, slug='chaos-typo',"
                " gates=GateRules(always_gate=('chaos_transfr',))))",
                "from django.core.management import call_command",
                "call_command('check')",
            ]
        )
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env=self.sv.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode == 0 or "approvals.E001" not in done.stderr:
            return f"check exited {done.returncode}: {done.stderr[-300:]}"
        return ""

    def attack_truncate(self) -> str:
        import psycopg

        dsn = f"host=127.0.0.1 port={self.sv.pg_port} user=postgres dbname=agentops_chaos"
        with psycopg.connect(dsn, autocommit=True) as conn:
            before = conn.execute("select count(*) from runs_step").fetchone()[0]
            try:
                conn.execute("TRUNCATE runs_step CASCADE")
            except psycopg.Error as exc:
                if "append-only" not in str(exc):
                    return f"refused, but not by the audit trigger: {exc}"
            after = conn.execute("select count(*) from runs_step").fetchone()[0]
        if after < before:
            return f"the timeline went from {before} steps to {after}"
        return ""

    def attack_brute_force(self) -> str:
        def attempt(password: str) -> int:
            # The CSRF cookie is Secure (DEBUG is off): sent back by hand over plain HTTP.
            with urllib.request.urlopen(f"{self.http.base}/accounts/login/", timeout=10) as page:
                cookie = page.headers.get("Set-Cookie", "")
                html = page.read().decode()
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
            csrf = re.search(r"csrftoken=([^;]+)", cookie)
            form = urllib.parse.urlencode(
                {
                    "username": "chaos-victim",
                    "password": password,
                    "csrfmiddlewaretoken": token[1] if token else "",
                }
            ).encode()
            request = urllib.request.Request(
                f"{self.http.base}/accounts/login/",
                data=form,
                headers={"Cookie": f"csrftoken={csrf[1] if csrf else ''}"},
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    return response.status
            except urllib.error.HTTPError as exc:
                return exc.code

        codes = [attempt(f"guess-{n}") for n in range(5)]
        right = attempt(ATTACK["victim_password"])
        if codes[:4] != [200] * 4 or codes[-1] != 429 or right != 429:
            return f"wrong passwords answered {codes}, then the right one {right}"
        return ""

    def attack_surrogate(self) -> str:
        raw = b'{"agent": "%s", "input": {"tag": "a\\ud800b", "steps": 1}}' % AGENT.encode()
        request = urllib.request.Request(
            f"{self.http.base}/api/runs",
            data=raw,
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.op}"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return f"accepted with {response.status}"
        except urllib.error.HTTPError as exc:
            return f"answered {exc.code}" if exc.code >= 500 else ""


def prepare() -> tuple[str, str]:
    """The database made ready (tests/support/topology_setup.py) in this process, and what
    the attacks need. Returns the (operator, approver) API tokens."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from tests.support.topology_setup import prepare as prepare_database
    from triggers.models import WebhookSecret

    started = time.monotonic()
    tokens = prepare_database("chaos")
    # For the attacks: a webhook secret of the chaos agent, and an approver to brute-force.
    ATTACK["webhook_secret"] = WebhookSecret.objects.create(agent=AGENT, name="chaos").secret
    ATTACK["victim_password"] = secrets.token_urlsafe(12)
    get_user_model().objects.create_user(
        username="chaos-victim", password=ATTACK["victim_password"]
    )
    connection.close()
    print(f"  migrated, static files, users, tokens: {time.monotonic() - started:.1f} s")
    return tokens


def start(args, sv: Services) -> tuple[str, str]:
    tmp = sv.tmp
    sv.start_postgres()
    sv.argv["redis"] = [
        "redis-server", "--port", str(sv.redis_port), "--bind", "127.0.0.1",
        "--save", "", "--appendonly", "no", "--daemonize", "no",
    ]  # fmt: skip
    sv.env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "REDIS_"))},
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:{sv.pg_port}/agentops_chaos",
        "REDIS_URL": f"redis://127.0.0.1:{sv.redis_port}/0",
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "127.0.0.1",
        "SECURE_SSL_REDIRECT": "false",
        "AGENTOPS_LEASE_SECONDS": str(args.lease),
        # A lease taken for a model call is 1.25 x this: keep it near the lease (scripted).
        "AGENTOPS_LLM_TIMEOUT_SECONDS": str(args.lease),
        "AGENTOPS_VAR_DIR": str(tmp / "var"),
        "AGENTOPS_PUBLIC_URL": f"http://127.0.0.1:{sv.web_port}",
        "AGENTOPS_NOTIFY_EMAIL": "false",
        "CHAOS_EFFECTS_DB": str(tmp / "effects.sqlite3"),
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }
    os.environ.update(sv.env)
    sv.spawn("redis")
    sv.spawn("starvation", [sys.executable, "-c", STARVATION_SAMPLER])
    wait_port(sv.redis_port, 30)
    import bench.chaos_app  # noqa: F401  (django.setup() for this process, the chaos agent)

    op, ap = prepare()
    effect_ledger.create(sv.env["CHAOS_EFFECTS_DB"])

    py = sys.executable
    sv.spawn(
        "daphne",
        [py, "-m", "daphne", "-b", "127.0.0.1", "-p", str(sv.web_port),
         "bench.chaos_app:application"],
    )  # fmt: skip
    for name in ("w1", "w2"):
        sv.spawn(
            name,
            [py, "-m", "celery", "-A", "bench.chaos_app", "worker", "--pool", "threads",
             "-c", str(args.concurrency), "-n", f"{name}-{os.getpid()}@%h",
             "--loglevel", "WARNING", "--without-gossip", "--without-mingle"],
        )  # fmt: skip
    sv.spawn(
        "beat",
        [py, "-m", "celery", "-A", "bench.chaos_app", "beat", "--schedule",
         str(tmp / "beat-schedule"), "--loglevel", "WARNING"],
    )  # fmt: skip
    return op, ap


# --- checks ------------------------------------------------------------------------------------
def settle(chaos: Chaos, run_ids: set, timeout: float) -> float:
    """Wait until every run is terminal (people keep deciding meanwhile); seconds waited.
    Bounded by the runs' own progress: the wait ends when no run has written a step for
    `timeout` seconds (stuck runs are then reported), however long progressing runs take,
    up to 5 x `timeout` in all."""
    from django.db import OperationalError, connection
    from django.db.models import Sum

    from runs.models import Run

    started = time.monotonic()
    connection.close()
    progress, last_progress = None, started
    while time.monotonic() - last_progress < timeout and time.monotonic() - started < 5 * timeout:
        try:
            runs = Run.objects.filter(pk__in=run_ids)
            statuses = dict(runs.values_list("pk", "status"))
            seen = runs.aggregate(steps=Sum("last_seq"))["steps"]
        except OperationalError:
            connection.close()
            time.sleep(1)
            continue
        if all(s in Run.TERMINAL_STATUSES for s in statuses.values()):
            break
        if seen != progress:
            progress, last_progress = seen, time.monotonic()
        time.sleep(1)
    return time.monotonic() - started


# --- how starved of CPU the machine was, and the pools -------------------------------------------
STARVATION_SAMPLER = """
import os, sys, time
while True:
    wall, cpu = time.perf_counter(), time.process_time()
    x = 0
    for i in range(400_000):
        x += i
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"{time.time():.3f} {wall / max(cpu, 1e-6):.3f} {os.getloadavg()[0]:.2f}", flush=True)
    time.sleep(0.5)
"""


def starvation_samples(sv: Services) -> list[tuple[float, float, float]]:
    """(epoch, wall/cpu of the sampler's loop, 1-minute load average), oldest first."""
    samples = []
    with contextlib.suppress(OSError):
        for line in (sv.tmp / "starvation.log").read_text().splitlines():
            with contextlib.suppress(ValueError):
                at, ratio, load = (float(x) for x in line.split())
                samples.append((at, ratio, load))
    return samples


def starvation_between(samples: list, start: float, end: float) -> float:
    """The mean slowdown measured from start to end (epochs), at least 1; the nearest sample
    when none fell in between."""
    within = [ratio for at, ratio, _ in samples if start <= at <= end]
    if not within and samples:
        within = [min(samples, key=lambda s: abs(s[0] - (start + end) / 2))[1]]
    return max(1.0, sum(within) / len(within)) if within else 1.0


POOL_FIELDS = (
    ("pool_size", "size"),
    ("pool_available", "idle"),
    ("checked_out", "checked out"),
    ("requests_waiting", "waiting"),
    ("connections_lost", "lost"),
    ("returns_bad", "returned broken"),
    ("connections_errors", "connect errors"),
    ("requests_errors", "checkout errors"),
)


def pool_line(stats: dict | None) -> str:
    if not stats:
        return "no answer"
    if not stats.get("open", True) or "error" in stats:
        return stats.get("error", "pool not open")
    return ", ".join(f"{label} {stats.get(key, 0)}" for key, label in POOL_FIELDS)


def daphne_pool(sv: Services) -> dict | None:
    try:
        url = f"http://127.0.0.1:{sv.web_port}/-/pool"
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.loads(response.read())
    except (OSError, ValueError):
        return None


def print_pools(sv: Services, when: str) -> dict | None:
    """Prints every process's pool statistics; returns daphne's."""
    web = daphne_pool(sv)
    print(f"pool statistics {when}:")
    print(f"  daphne: {pool_line(web)}")
    for path in sorted(sv.tmp.glob("pool-*.json")):
        pid = path.stem.removeprefix("pool-")
        alive = any(p.pid == int(pid) for p in sv.procs.values() if p.poll() is None) or any(
            _is_child_of(int(pid), p.pid) for p in sv.procs.values() if p.poll() is None
        )
        if not alive:
            continue  # a killed worker's last report
        with contextlib.suppress(OSError, ValueError):
            stats = json.loads(path.read_text())
            print(f"  worker {pid}: {pool_line(stats)}")
    return web


def _is_child_of(pid: int, parent: int) -> bool:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) == parent
    except (OSError, ValueError, IndexError):
        return False


def check(chaos: Chaos, watchers: list[Watcher], t_end: float) -> list[str]:
    from django.utils import timezone

    from runs.models import Run, SideEffect, Step

    args, st = chaos.args, chaos.st
    failures: list[str] = []
    tags = {launch.tag: launch for launch in st.launches}
    runs = list(Run.objects.filter(agent=AGENT))
    by_tag: dict[str, list[Run]] = {}
    for run in runs:
        by_tag.setdefault(run.input["tag"], []).append(run)
    acknowledged = {t for t, launch in tags.items() if launch.acknowledged}
    lost = acknowledged - set(by_tag)
    unasked = set(by_tag) - set(tags)
    canaries = sum(1 for launch in st.launches if launch.canary)
    print()
    print(
        f"runs launched {len(tags)} ({canaries} canaries), acknowledged {len(acknowledged)}, "
        f"found in the database {len(set(by_tag) & set(tags))} ({len(runs)} rows); "
        f"launch retries {sum(launch.attempts - 1 for launch in tags.values())}, "
        f"no answer {sum(launch.no_answer for launch in tags.values())}, "
        f"in progress {sum(launch.in_progress for launch in tags.values())}"
    )
    if lost:
        failures.append(f"{len(lost)} acknowledged runs not in the database: {sorted(lost)[:5]}")
    never = sorted(t for t, launch in tags.items() if not launch.acknowledged)
    if never:
        failures.append(f"{len(never)} launches never got their 201: {never[:5]}")
    if unasked:
        failures.append(f"runs nobody launched: {sorted(unasked)[:5]}")
    # Launches carry an Idempotency-Key: a retry after a lost answer must find the first run.
    duplicates = {t: len(rs) for t, rs in by_tag.items() if len(rs) > 1}
    print(f"duplicate runs from retried launches: {sum(duplicates.values()) - len(duplicates)}")
    for tag, n in list(duplicates.items())[:5]:
        failures.append(f"launch {tag} made {n} runs (retried with one Idempotency-Key)")

    statuses: dict[str, int] = {}
    reasons: dict[str, int] = {}
    for run in runs:
        statuses[run.status] = statuses.get(run.status, 0) + 1
        if run.termination_reason:
            reasons[run.termination_reason] = reasons.get(run.termination_reason, 0) + 1
    waiting = [r for r in runs if r.status == Run.Status.WAITING]
    print(f"status {statuses}; termination {reasons}; waiting for a person {len(waiting)}")
    # The people decide everything as it comes: a run still waiting at the end was lost on
    # the way to them (a gate nobody was shown), and so is one still active.
    for run in waiting[:5]:
        failures.append(f"run {run.pk} still waiting for a person at the end")
    active = [r for r in runs if r.status in (Run.Status.QUEUED, Run.Status.RUNNING)]
    for run in active[:5]:
        failures.append(f"run {run.pk} still {run.status} at the end")
    # Stuck: active, and nothing happened to it for 2 x lease (its lease, or its last write).
    now = timezone.now()
    stuck = []
    for run in runs:
        if run.status in (Run.Status.QUEUED, Run.Status.RUNNING):
            last = max(filter(None, [run.updated_at, run.lease_expires_at]))
            if (now - last).total_seconds() > 2 * args.lease:
                stuck.append(run)
    print(f"stuck beyond 2 x lease ({2 * args.lease:.0f} s): {len(stuck)}")
    for run in stuck[:5]:
        failures.append(f"stuck: run {run.pk} {run.status} since {run.updated_at:%H:%M:%S}")
    if len(stuck) > 5:
        failures.append(f"... and {len(stuck) - 5} more stuck runs")
    for run in runs:
        if run.status == Run.Status.FAILED:
            failures.append(f"run {run.pk} failed: {run.termination_reason} {run.status_detail}")

    # Timelines: seq 1..n without gaps, hash chain intact.
    gaps = 0
    seqs: dict = {}
    for run_id, seq in Step.objects.filter(run__agent=AGENT).values_list("run_id", "seq"):
        seqs.setdefault(run_id, []).append(seq)
    for run in runs:
        got = sorted(seqs.get(run.pk, []))
        if got != list(range(1, run.last_seq + 1)):
            gaps += 1
            failures.append(f"run {run.pk}: seqs {got[:3]}..{got[-3:]} != 1..{run.last_seq}")
        ok, bad = run.verify_chain()
        if not ok:
            failures.append(f"run {run.pk}: hash chain breaks at seq {bad}")
    print(f"step seq gaps: {gaps} runs; steps {sum(len(s) for s in seqs.values())}")

    # Stalls: the longest a run went without a step, a wait for a person aside (from the
    # step that parked it to the decision that woke it).
    downtimes = [f.restored - f.at for f in st.faults if f.restored]
    bound = args.stall_bound or 2 * args.lease + max(downtimes, default=0.0)
    samples = starvation_samples(chaos.sv)
    timeline: dict = {}
    for run_id, kind, event, at in (
        Step.objects.filter(run__agent=AGENT)
        .order_by("run_id", "seq")
        .values_list("run_id", "kind", "data__event", "created_at")
    ):
        timeline.setdefault(run_id, []).append((kind, event, at))
    worst_stall, worst_run = 0.0, None
    # The stall furthest beyond its bound scaled by the starvation measured during it.
    worst_scaled = (0.0, None, 0.0, 1.0)  # (stall / scaled bound, run, stall, slowdown)
    for run_id, steps in timeline.items():
        for (_, event, before), (kind, _, after) in itertools.pairwise(steps):
            if event == "paused" or kind == Step.Kind.DECISION:
                continue  # waiting for a person
            gap = (after - before).total_seconds()
            if gap > worst_stall:
                worst_stall, worst_run = gap, run_id
            if gap > bound:
                slowdown = starvation_between(samples, before.timestamp(), after.timestamp())
                if gap / (bound * slowdown) > worst_scaled[0]:
                    worst_scaled = (gap / (bound * slowdown), run_id, gap, slowdown)
    ratios = [ratio for _, ratio, _ in samples]
    loads = [load for _, _, load in samples]
    if samples:
        ratios_sorted = sorted(ratios)
        print(
            f"CPU starvation (a CPU-bound loop's wall time / its CPU time; 1.0 at rest): median "
            f"{ratios_sorted[len(ratios) // 2]:.1f}, worst {ratios_sorted[-1]:.1f}; load average "
            f"{min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} CPUs"
        )
    print(f"worst stall: {worst_stall:.1f} s (run {worst_run}); bound {bound:.1f} s")
    if worst_stall > bound:
        excess, run_id, gap, slowdown = worst_scaled
        scaled = bound * slowdown
        if excess > 1.0 or args.stall_bound:
            failures.append(
                f"run {run_id} stalled {gap:.1f} s: beyond the bound {bound:.1f} s"
                + (
                    ""
                    if args.stall_bound
                    else f" and the bound scaled by the CPU starvation"
                    f" during that stall ({slowdown:.1f}x): {scaled:.1f} s"
                )
            )
        else:
            print(
                f"  bound NOT reached on this machine: run {worst_run} stalled {worst_stall:.1f}"
                f" s > {bound:.1f} s; every stall beyond it was within the bound scaled by the"
                f" CPU starvation measured during it (the worst: {gap:.1f} s at {slowdown:.1f}x,"
                f" scaled bound {scaled:.1f} s): the processes waited for a CPU, not for a fault"
            )
    if st.faults:
        # The runs that were in flight when the last fault struck: how long they took to end.
        last = max(f.wall for f in st.faults)
        after_last = [
            r.finished_at.timestamp() - last
            for r in runs
            if r.finished_at and r.created_at.timestamp() < last < r.finished_at.timestamp()
        ]
        print(
            f"worst time to terminal after the last fault: {max(after_last, default=0.0):.1f} s "
            f"({len(after_last)} runs in flight then)"
        )
    for launch in st.launches:
        if launch.lost_enqueue:
            run = next((r for r in runs if r.input.get("tag") == launch.tag), None)
            took = (
                f"{(run.finished_at - run.created_at).total_seconds():.1f} s to terminal"
                if run and run.finished_at
                else "not terminal"
            )
            print(f"run launched while Redis was down ({launch.tag}): {took}")

    # Effects against the ledger.
    read = effect_ledger.read(chaos.effects_path)
    effects, dup_key, dup_ref, per_ref = read.effects, read.dup_key, read.dup_ref, read.per_ref
    retried_same_key = read.retried_same_key
    ledger = dict(SideEffect.objects.filter(run__agent=AGENT).values_list("key", "status"))
    not_committed = [(ref, tool) for ref, key, tool, _ in effects if ledger.get(key) != "committed"]
    missing = []
    for run in runs:
        if run.termination_reason != Run.Termination.COMPLETED:
            continue
        want = effect_ledger.expected_refs(
            run.input["tag"], int(run.input["steps"]), bool(run.input.get("gate"))
        )
        missing += [ref for ref in want if (str(run.pk), ref) not in per_ref]
    ledger_statuses: dict[str, int] = {}
    for status in ledger.values():
        ledger_statuses[status] = ledger_statuses.get(status, 0) + 1
    answers: dict[str, int] = {}
    for answer in st.questions.values():
        answers[answer] = answers.get(answer, 0) + 1
    print(
        f"effects {len(effects)}; duplicate effects per idempotency key {len(dup_key)}, per "
        f"logical call {len(dup_ref)}; calls retried with the same key {retried_same_key}; "
        f"ledger {ledger_statuses}; effects the ledger does not show committed "
        f"{len(not_committed)}; effects missing from completed runs {len(missing)}"
    )
    print(
        f"people: {len(st.approved)} gated calls approved, {len(st.questions)} 'outcome "
        f"unknown' questions answered {answers}"
    )
    for (tool, key), n in list(dup_key.items())[:5]:
        failures.append(f"duplicate effect: {tool} key {key[:12]}... happened {n} times")
    for (run_id, ref), n in list(dup_ref.items())[:5]:
        failures.append(f"duplicate effect: call {ref} of run {run_id} happened {n} times")
    for ref, tool in not_committed[:5]:
        failures.append(f"effect {tool} {ref} happened but the ledger does not say committed")
    for ref in missing[:5]:
        failures.append(f"effect {ref} missing from a completed run")

    # HTTP: 5xx during each fault (until recovered) and after it (until the next one).
    hits = sorted(chaos.http.hits, key=lambda h: h.at)
    faults = st.faults
    print()
    print(
        f"{'fault':<28} {'at s':>6} {'down s':>6} {'api s':>6} {'canary s':>8} "
        f"{'recover s':>9} {'5xx dur':>7} {'5xx aft':>7} {'no ans':>6}  notes"
    )
    t0 = faults[0].at if faults else t_end
    before = [h for h in hits if h.at < t0 and h.code >= 500 and h.what != "GET /healthz"]
    if before:
        failures.append(f"{len(before)} HTTP 5xx before the first fault: {before[:3]}")
    for i, fault in enumerate(faults):
        end = faults[i + 1].at if i + 1 < len(faults) else t_end
        rec = fault.recovered or end
        window = [h for h in hits if fault.at <= h.at < end and h.what != "GET /healthz"]
        during = [h for h in window if h.at < rec and h.code >= 500]
        after = [h for h in window if h.at >= rec and h.code >= 500]
        no_answer = sum(1 for h in window if h.code == 0)
        codes = ",".join(sorted({str(h.code) for h in during}))

        def rel(t: float, fault=fault) -> str:
            return f"{t - fault.at:.1f}" if t else "-"

        print(
            f"{fault.kind:<28} {fault.at - t0:6.1f} {rel(fault.restored):>6} "
            f"{rel(fault.api_back):>6} {rel(fault.canary_done):>8} {rel(fault.recovered):>9} "
            f"{len(during):>7} {len(after):>7} {no_answer:>6}  "
            f"{fault.note}{' codes ' + codes if codes else ''}"
            f"{f' orphans moved on {rel(fault.orphans_done)} s' if fault.orphans else ''}"
        )
        if not fault.recovered:
            failures.append(f"{fault.kind} at {fault.at - t0:.1f} s: not recovered")
        if after:
            failures.append(
                f"{fault.kind} at {fault.at - t0:.1f} s: {len(after)} HTTP 5xx after recovery: "
                + ", ".join(f"{h.what} {h.code}" for h in after[:3])
            )
        for h in during:
            if h.code == 500:
                failures.append(f"{fault.kind}: HTTP 500 from {h.what} during the fault")
                break
    recoveries = [f.recovered - f.at for f in faults if f.recovered]
    if recoveries:
        print(
            f"time to recover: max {max(recoveries):.1f} s, "
            f"mean {sum(recoveries) / len(recoveries):.1f} s over {len(recoveries)} faults"
        )
    hung = [h for h in hits if h.code == HUNG]
    print(f"hung requests (no answer within the client's timeout): {len(hung)}")
    if hung:
        failures.append(f"{len(hung)} hung requests: " + ", ".join(f"{h.what}" for h in hung[:3]))
    for fault in faults:
        if fault.kind.startswith("kill worker") and not fault.orphans:
            failures.append(f"{fault.kind} at {fault.at - t0:.1f} s hit no run: nothing exercised")
    after_all = [h for h in hits if h.at >= t_end and h.code >= 500 and h.what != "GET /healthz"]
    if after_all:
        failures.append(f"{len(after_all)} HTTP 5xx after the faults ended")

    # WebSocket clients against the database.
    print()
    for watcher in watchers:
        run = Run.objects.get(pk=watcher.run_id)
        want = list(range(1, run.last_seq + 1))
        ok = watcher.seen == want
        print(
            f"websocket on {run.pk} ({run.status}): {len(watcher.seen)} steps over "
            f"{watcher.connects} connections, database has {run.last_seq}: "
            f"{'equal' if ok else 'DIFFERENT'}"
        )
        if not ok:
            dups = len(watcher.seen) - len(set(watcher.seen))
            missing_seqs = sorted(set(want) - set(watcher.seen))
            failures.append(
                f"websocket on {run.pk}: {dups} duplicates, missing {missing_seqs[:10]}, "
                f"in order {watcher.seen == sorted(watcher.seen)}"
            )
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--pg-restarts", type=int, default=2)
    parser.add_argument("--redis-restarts", type=int, default=1)
    parser.add_argument("--kills", type=int, default=5, help="kill -9 of a worker")
    parser.add_argument("--daphne-kills", type=int, default=1)
    parser.add_argument(
        "--seconds", type=float, default=0, help="fault window (default: 7 s per fault, >= 60)"
    )
    parser.add_argument("--watchers", type=int, default=3, help="WebSocket clients")
    parser.add_argument("--lease", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=20, help="threads per worker")
    parser.add_argument("--redis-down", type=float, default=3.0)
    parser.add_argument("--recover-timeout", type=float, default=180.0)
    parser.add_argument(
        "--drain", type=float, default=120.0, help="longest wait without any run progressing (s)"
    )
    parser.add_argument(
        "--start-cap",
        type=float,
        default=600.0,
        help="longest wait for a starting daphne that is still alive (s)",
    )
    parser.add_argument(
        "--stall-bound",
        type=float,
        default=0.0,
        help="longest a run may go without a step (default: 2 x lease + the longest outage)",
    )
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    n_faults = args.pg_restarts + args.redis_restarts + args.kills + args.daphne_kills
    args.seconds = args.seconds or max(60.0, 7.0 * n_faults)

    tmp = Path(tempfile.mkdtemp(prefix="agentops-chaos-"))
    tmp.chmod(0o755)
    sv = Services(tmp)
    atexit.register(sv.stop_all)
    # SIGTERM as Ctrl-C: unwinds through the finally below.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    started = time.monotonic()
    failures: list[str] = []
    finished = False
    try:
        print(
            f"chaos: {args.runs} runs, {args.pg_restarts} postgres restarts, "
            f"{args.redis_restarts} redis shutdowns, {args.kills} worker kills, "
            f"{args.daphne_kills} daphne kills over {args.seconds:.0f} s; "
            f"lease {args.lease:.0f} s; "
            f"postgres :{sv.pg_port}, redis :{sv.redis_port}, daphne :{sv.web_port}; {tmp}",
            flush=True,
        )
        op, ap = start(args, sv)
        client = Client(f"http://127.0.0.1:{sv.web_port}")
        wait_http(client, "/healthz", args.start_cap, proc=sv.procs["daphne"])
        client.hits.clear()
        print(f"topology up in {time.monotonic() - started:.1f} s", flush=True)

        chaos = Chaos(args, sv, client, op, ap)
        session = session_for("operator")
        watchers = []
        for _ in range(args.watchers):
            # Long runs, so the sockets see faults: about one iteration a second.
            launch = chaos.launch(steps=min(200, int(args.seconds)), gate=True)
            if launch.acknowledged:
                watchers.append(Watcher(client.base, launch.run_id, session))
        for watcher in watchers:
            watcher.start()
        t0 = time.monotonic()
        threads = [
            threading.Thread(target=chaos.launcher, args=(t0,), daemon=True),
            threading.Thread(target=chaos.people, daemon=True),
            threading.Thread(target=chaos.prober, daemon=True),
        ]
        for thread in threads:
            thread.start()
        chaos.faults(t0)
        t_end = time.monotonic()
        threads[0].join(timeout=args.recover_timeout)
        # Let the last recoveries (and their canaries) finish.
        deadline = time.monotonic() + args.recover_timeout
        while time.monotonic() < deadline and any(
            not f.recovered and time.monotonic() - f.at < args.recover_timeout
            for f in chaos.st.faults
        ):
            time.sleep(0.5)
        print(f"faults done at {t_end - t0:.0f} s", flush=True)
        print_pools(sv, "after the faults")
        print("the attacks", flush=True)
        attack_failures = chaos.attacks()
        print("draining", flush=True)
        ids = {launch.run_id for launch in chaos.st.launches if launch.acknowledged}
        drained = settle(chaos, ids, args.drain)
        time.sleep(2)  # the sockets' last steps
        chaos.st.stop.set()
        for watcher in watchers:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and watcher.last < _last_seq(watcher.run_id):
                time.sleep(0.25)
            watcher.stop.set()
        print(f"drained in {drained:.0f} s", flush=True)
        failures = check(chaos, watchers, t_end)
        # The requests are over (the prober stopped; a request abandoned by its client waits
        # at most the pool's 30 s): every connection of daphne's pool is back in it.
        deadline = time.monotonic() + 40
        while True:
            web = daphne_pool(sv)
            if (web and web.get("checked_out", 1) == 0) or time.monotonic() > deadline:
                break
            time.sleep(1)
        web = print_pools(sv, "at the end")
        if web is None or web.get("checked_out"):
            failures.append(f"connections left checked out of daphne's pool: {pool_line(web)}")
        failures += chaos.st.errors + attack_failures
        finished = True
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        return 130
    finally:
        sv.stop_all()
        if args.keep or failures or not finished:
            print(f"logs of the processes kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print()
    for failure in failures:
        print("FAIL", failure)
    print(f"total {time.monotonic() - started:.0f} s")
    print("OK" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


def _last_seq(run_id: str) -> int:
    from runs.models import Run

    return Run.objects.filter(pk=run_id).values_list("last_seq", flat=True).first() or 0


if __name__ == "__main__":
    sys.exit(main())
