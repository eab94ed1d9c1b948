"""A fleet on one machine (docs/operations/fleet.md), started here with the real parts, each on
a private port and ended by its PID: a Postgres cluster of its own (tests/support/
postgres_cluster.py) behind PgBouncer in transaction mode, a Redis Sentinel group (a primary, a
replica, three sentinels), two daphne processes behind HAProxy (compose's configuration,
deploy/haproxy/haproxy.cfg), three Celery workers (two on `runs`, one on `people,sweeps`) and
two beats that share redbeat's leader lock. The chaos bench's agent drives it
(bench/chaos_app.py: a scripted model, slow tools whose effects land in a file outside the
database, one gated call a person approves).

Each test launches runs through the load balancer with an API token, injects one fault while
they are in flight and a browser's WebSocket follows a long run, then checks that every run
reached a terminal state, that the socket stayed live (reconnected through HAProxy, every step
seen once) and what the fault cost. The figures are printed, and written to
var/fleet-figures.txt, for the operations page:

    DATABASE_URL=postgres://… REDIS_URL=redis://… uv run pytest tests/test_fleet.py -s

(FLEET_KEEP=1 keeps the processes' logs, HAProxy's and PgBouncer's, and says where.)

CI runs it in the Postgres + Redis pass only (the skip reason names DATABASE_URL: the
`services` marker, tests/conftest.py); it needs pgbouncer, haproxy, redis-server and the
Postgres server binaries, and fails without them.
"""

import contextlib
import itertools
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import psycopg
import pytest
import redis
from django.conf import settings

from bench.chaos import Chaos, Launch
from runs.models import Run
from tests.support import effect_ledger
from tests.support.haproxy import HAProxy
from tests.support.http_clients import HUNG, Client, Watcher, wait_http
from tests.support.pgbouncer import PgBouncer
from tests.support.postgres_cluster import Cluster, bindir
from tests.support.redis_sentinel import MASTER, SentinelGroup
from tests.support.supervisor import ROOT, Supervisor, free_port, read_text, wait_port

pytestmark = pytest.mark.skipif(
    not (settings.IS_POSTGRES and settings.REDIS_URL),
    reason="the fleet runs in CI's services pass: needs DATABASE_URL=postgres://… and REDIS_URL",
)

DATABASE = "agentops_fleet"
LEASE = 5  # seconds: a dead worker's runs are taken over within 1.5 leases
BEAT_LOCK = 5  # seconds: a standby beat takes over within it
POOL_MAX = 5  # DATABASE_POOL_MAX of every process (the connection budget, docs)
THREADS = 8  # threads per worker
TERMINAL = {str(s) for s in Run.TERMINAL_STATUSES}
FIGURES: dict[str, str] = {}


def figure(name: str, value: str) -> None:
    FIGURES[name] = value
    print(f"fleet: {name}: {value}", flush=True)


@dataclass
class Fleet:
    sv: Supervisor
    cluster: Cluster
    bouncer: PgBouncer
    group: SentinelGroup
    proxy: HAProxy
    web_ports: dict[str, int]
    client: Client
    chaos: Chaos
    sessions: dict[str, str]
    launches: list[Launch] = field(default_factory=list)

    def sql(self, query: str, *args) -> list[tuple]:
        """Straight to Postgres (not through PgBouncer): what the database holds."""
        with psycopg.connect(self.cluster.url(DATABASE), autocommit=True) as conn:
            return conn.execute(query, args).fetchall()

    def statuses(self, run_ids: list[str]) -> dict[str, str]:
        rows = self.sql("select id::text, status from runs_run where id::text = any(%s)", run_ids)
        return dict(rows)

    def launch(self, n: int, *, steps: int = 2) -> list[Launch]:
        """n runs through the load balancer (every other one gated), one thread each."""
        out: list[Launch] = []
        lock = threading.Lock()

        def one(i: int) -> None:
            launch = self.chaos.launch(steps=steps, gate=i % 2 == 0, timeout=60)
            with lock:
                out.append(launch)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.launches += out
        return out

    def settle(self, run_ids: list[str], idle: float = 60.0) -> float:
        """Until every run is terminal; bounded by progress: no step written anywhere for
        `idle` seconds ends the wait. Seconds waited."""
        started = progress_at = time.monotonic()
        progress = None
        while time.monotonic() - progress_at < idle:
            with contextlib.suppress(psycopg.Error):
                rows = self.sql(
                    "select status, last_seq from runs_run where id::text = any(%s)", run_ids
                )
                if len(rows) == len(run_ids) and all(s in TERMINAL for s, _ in rows):
                    break
                seen = sum(seq for _, seq in rows)
                if seen != progress:
                    progress, progress_at = seen, time.monotonic()
            time.sleep(0.5)
        return time.monotonic() - started

    def watch(self) -> Watcher:
        """A browser on a long gated run, through the load balancer."""
        launch = self.chaos.launch(steps=10, gate=True, timeout=60)
        assert launch.acknowledged, f"the watched run was not launched: {launch}"
        self.launches.append(launch)
        watcher = Watcher(self.client.base, launch.run_id, self.sessions["operator"])
        watcher.start()
        deadline = time.monotonic() + 30
        while not watcher.seen and time.monotonic() < deadline:
            time.sleep(0.2)
        assert watcher.seen, "the watcher saw no step within 30 s of its run's launch"
        return watcher

    def last_seq(self, run_id: str) -> int:
        return self.sql("select last_seq from runs_run where id = %s", run_id)[0][0]

    def beat_leads(self) -> dict[str, int]:
        """How many times each beat took the lead (its log says so: redbeat's at start,
        agentops/beat.py's after a Redis error or a leader's death)."""
        return {
            name: self.sv.log(name).count("beat: Acquired lock")
            + self.sv.log(name).count("beat: leading")
            for name in self.sv.procs
            if name.startswith("beat")
        }

    def pools(self) -> dict[str, int]:
        """PgBouncer's view: client connections (the processes') and server ones (Postgres)."""
        conn = psycopg.connect(self.bouncer.url("pgbouncer"), autocommit=True)
        try:
            result = conn.pgconn.exec_(b"SHOW POOLS")  # its console takes simple queries only
            names = [result.fname(i).decode() for i in range(result.nfields)]
            totals: dict[str, int] = {}
            for row in range(result.ntuples):
                record = {
                    name: (result.get_value(row, i) or b"").decode() for i, name in enumerate(names)
                }
                if record["database"] != DATABASE:
                    continue
                for key in ("cl_active", "cl_waiting", "sv_active", "sv_idle", "sv_used"):
                    totals[key] = totals.get(key, 0) + int(record[key] or 0)
            return totals
        finally:
            conn.close()


def _env(sv_tmp: Path, cluster: Cluster, bouncer: PgBouncer, group: SentinelGroup) -> dict:
    return {
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("DATABASE_", "REDIS_", "AGENTOPS_", "CELERY_", "PYTEST_"))
            and k != "DJANGO_SETTINGS_MODULE"
        },
        "DATABASE_URL": bouncer.url(DATABASE),
        "DATABASE_PGBOUNCER": "true",
        "DATABASE_POOL_MAX": str(POOL_MAX),
        "REDIS_URL": group.url(0),
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "127.0.0.1,localhost",  # localhost: HAProxy's health checks
        "SECURE_SSL_REDIRECT": "false",
        "AGENTOPS_LEASE_SECONDS": str(LEASE),
        "AGENTOPS_LLM_TIMEOUT_SECONDS": str(LEASE),
        "AGENTOPS_BEAT_LOCK_SECONDS": str(BEAT_LOCK),
        "AGENTOPS_VAR_DIR": str(sv_tmp / "var"),
        "AGENTOPS_NOTIFY_EMAIL": "false",
        "CHAOS_EFFECTS_DB": str(sv_tmp / "effects.sqlite3"),
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": str(ROOT),
    }


def _start(sv: Supervisor, web_ports: dict[str, int]) -> None:
    py = sys.executable
    for name, port in web_ports.items():
        sv.spawn(
            name,
            [py, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
             "--access-log", str(sv.tmp / f"{name}-access.log"), "bench.chaos_app:application"],
        )  # fmt: skip
    # As compose.yaml runs them: the people-facing work and the sweeps on a worker of their
    # own, which a backlog of runs never delays.
    for name, queues in (("worker1", "runs"), ("worker2", "runs"),
                         ("people", "people,sweeps")):  # fmt: skip
        sv.spawn(
            name,
            [py, "-m", "celery", "-A", "bench.chaos_app", "worker", "--pool", "threads",
             "-c", str(THREADS), "-Q", queues, "-n", f"{name}-{os.getpid()}@%h",
             "--loglevel", "WARNING", "--without-gossip", "--without-mingle"],
        )  # fmt: skip
    for name in ("beat1", "beat2"):
        sv.spawn(
            name,
            [py, "-m", "celery", "-A", "bench.chaos_app", "beat", "--loglevel", "INFO",
             "--schedule", str(sv.tmp / f"{name}-schedule")],
            env={"LOG_LEVEL": "INFO"},  # its "beat: leading" lines (agentops/beat.py)
        )  # fmt: skip


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    for binary in ("pgbouncer", "haproxy"):
        if not (shutil.which(binary) or Path(f"/usr/sbin/{binary}").exists()):
            pytest.fail(f"{binary} is not installed (apt-get install {binary}; .ci/run does)")
    pg_bin = bindir()
    if pg_bin is None or not shutil.which("redis-server"):
        pytest.fail("the Postgres server binaries and redis-server are needed")
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="agentops-fleet-"))
    tmp.chmod(0o755)
    cluster = Cluster(pg_bin)
    bouncer = group = proxy = None
    sv = Supervisor(tmp)
    people_stop = None
    try:
        cluster.init()
        with psycopg.connect(cluster.url("postgres"), autocommit=True) as conn:
            conn.execute(f"create database {DATABASE}")
        # Many clients (7 processes of POOL_MAX each, and this test), few servers.
        bouncer = PgBouncer("127.0.0.1", cluster.port, pool_size=20, max_clients=200)
        bouncer.start()
        group = SentinelGroup()
        group.start()
        sv.env = _env(tmp, cluster, bouncer, group)
        effect_ledger.create(sv.env["CHAOS_EFFECTS_DB"])
        # Migrations straight to Postgres, as a one-off job (compose's `migrate`).
        prepared = subprocess.run(
            [sys.executable, "-m", "tests.support.topology_setup"],
            cwd=ROOT,
            env={**sv.env, "DATABASE_URL": cluster.url(DATABASE)},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert prepared.returncode == 0, prepared.stderr[-4000:]
        figure(
            "  database, PgBouncer, Sentinel group, migrated", f"{time.monotonic() - started:.1f} s"
        )
        ready = json.loads(prepared.stdout.strip().splitlines()[-1])
        web_ports = {"web1": free_port(), "web2": free_port()}
        _start(sv, web_ports)
        for name, port in web_ports.items():
            wait_port(port, 300, proc=sv.procs[name])
        figure("  daphne listening", f"{time.monotonic() - started:.1f} s")
        proxy = HAProxy(list(web_ports.values()))
        proxy.start(timeout=60)
        proxy.wait_all_up(120)
        client = Client(f"http://127.0.0.1:{proxy.port}")
        wait_http(client, "/healthz", 120)
        chaos = Chaos(
            SimpleNamespace(seed=41),
            sv,
            client,
            ready["tokens"]["operator"],
            ready["tokens"]["approver"],
        )
        # The approver, all along: approves every gated call, answers "did it happen?" from
        # the effects file.
        people_stop = chaos.st.stop
        threading.Thread(target=chaos.people, daemon=True).start()
        fleet = Fleet(sv, cluster, bouncer, group, proxy, web_ports, client, chaos,
                      ready["sessions"])  # fmt: skip
        deadline = time.monotonic() + 60
        while sum(fleet.beat_leads().values()) < 1 and time.monotonic() < deadline:
            time.sleep(0.5)
        figure("topology up", f"{time.monotonic() - started:.1f} s")
        yield fleet
    finally:
        if people_stop is not None:
            people_stop.set()
        sv.stop_all()
        if proxy is not None:  # kept with the processes' logs
            (tmp / "haproxy.log").write_text(proxy.log())
        if bouncer is not None:
            (tmp / "pgbouncer.log").write_text(bouncer.log())
        for part in (proxy, group, bouncer):
            if part is not None:
                part.stop()
        cluster.destroy()
        if FIGURES:
            out = ROOT / "var" / "fleet-figures.txt"
            out.parent.mkdir(exist_ok=True)
            out.write_text("".join(f"{k}: {v}\n" for k, v in FIGURES.items()))
        if os.environ.get("FLEET_KEEP"):
            print(f"fleet: logs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def _errors(client: Client, since: float) -> list[str]:
    """Requests since `since` that got no answer, hung, or a 5xx."""
    return [
        f"{hit.what} -> {hit.code}"
        for hit in client.hits
        if hit.at >= since and (hit.code in (0, HUNG) or hit.code >= 500)
    ]


def _through_a_fault(
    fleet: Fleet, name: str, fault: Callable[[Watcher], None], runs: int = 6
) -> tuple[Watcher, list[Launch], float]:
    """A watched long run and `runs` short ones launched through the balancer, `fault`
    injected while they run, then every run settled. Returns the watcher (stopped), the
    launches and when the fault was injected."""
    watcher = fleet.watch()
    launches = fleet.launch(runs)
    assert all(launch.acknowledged for launch in launches), [
        launch for launch in launches if not launch.acknowledged
    ]
    time.sleep(1)  # in flight
    peak: dict[str, int] = {"clients": 0, "servers": 0}
    sampling = threading.Event()

    def sample() -> None:  # the connections PgBouncer sees while the runs go on
        while not sampling.wait(0.5):
            with contextlib.suppress(psycopg.Error):
                pools = fleet.pools()
                clients = pools["cl_active"] + pools["cl_waiting"]
                servers = pools["sv_active"] + pools["sv_idle"] + pools["sv_used"]
                peak.update(clients=max(peak["clients"], clients))
                peak.update(servers=max(peak["servers"], servers))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    at, wall = time.monotonic(), time.time()
    fault(watcher)
    ids = [launch.run_id for launch in launches] + [watcher.run_id]
    took = fleet.settle(ids)
    sampling.set()
    sampler.join()
    statuses = fleet.statuses(ids)
    assert {i: s for i, s in statuses.items() if s not in TERMINAL} == {}, f"{name}: stuck"
    assert len(statuses) == len(ids)
    # Terminal is not enough: each finished its work (a failed tool fails its run too).
    reasons = fleet.sql(
        "select id::text, termination_reason from runs_run where id::text = any(%s)", ids
    )
    assert {i: r for i, r in reasons if r != "completed"} == {}, f"{name}: not completed"
    # The socket's last steps, then every step of the run seen once, in order.
    last = fleet.last_seq(watcher.run_id)
    deadline = time.monotonic() + 15
    while watcher.last < last and time.monotonic() < deadline:
        time.sleep(0.2)
    watcher.stop.set()
    assert watcher.seen == list(range(1, last + 1)), f"{name}: the socket saw {watcher.seen}"
    figure(f"{name}: runs terminal", f"{len(ids)} of {len(ids)} in {time.monotonic() - at:.1f} s")
    figure(f"{name}: settled after the fault", f"{took:.1f} s")
    # When the watched run wrote its next step (the database's clock), against when the socket
    # showed it (_socket_gap): the difference is the live page's own delay.
    written = fleet.sql(
        "select extract(epoch from min(created_at)) from runs_step"
        " where run_id = %s and created_at > to_timestamp(%s)",
        watcher.run_id,
        wall,
    )[0][0]
    if written is not None:
        figure(
            f"{name}: the watched run's next step written", f"{float(written) - wall:.1f} s after"
        )
    figure(
        f"{name}: connections at peak",
        f"{peak['clients']} clients of PgBouncer, {peak['servers']} servers of Postgres",
    )
    return watcher, launches, at


def _socket_gap(watcher: Watcher, at: float) -> float:
    """Seconds from the fault to the first step the socket received after it."""
    after = [t for t in watcher.arrivals if t > at]
    return after[0] - at if after else float("inf")


def test_one_beat_leads_and_the_fleet_answers_through_the_balancer(fleet):
    leads = fleet.beat_leads()
    assert sorted(leads.values()) == [0, 1], f"beats that took the lead: {leads}"
    code, page = fleet.client.call("GET", "/api/runs?limit=1", fleet.chaos.op)
    assert code == 200, page
    # Every process's pool stays within its budget: the clients PgBouncer sees.
    pools = fleet.pools()
    processes = 7  # 2 daphne, 3 workers, 2 beats
    assert pools["cl_active"] + pools["cl_waiting"] <= processes * POOL_MAX + 2, pools
    figure(
        "connections at rest (2 web, 3 workers, 2 beats)",
        f"{pools['cl_active'] + pools['cl_waiting']} client connections to PgBouncer, "
        f"{pools['sv_active'] + pools['sv_idle'] + pools['sv_used']} server connections to "
        f"Postgres",
    )


def test_a_web_process_killed_costs_no_request_and_the_socket_reconnects(fleet):
    killed = []

    def kill_web(watcher: Watcher) -> None:
        # The daphne that holds the watcher's socket (its access log saw the connect).
        connect = f"WSCONNECT /ws/runs/{watcher.run_id}/"
        name = next(
            n for n in fleet.web_ports if connect in read_text(fleet.sv.tmp / f"{n}-access.log")
        )
        killed.append(name)
        fleet.sv.kill(name)  # SIGKILL, its sockets and requests in flight with it

    watcher, _, at = _through_a_fault(fleet, "web kill", kill_web)
    reconnect = [t - at for t in watcher.connected_at if t > at]
    assert reconnect, "the socket never reconnected"
    # Only a request in flight on the killed process may fail (HAProxy answers 502 for it);
    # the others go to the surviving one (option redispatch).
    errors = _errors(fleet.client, at)
    late = [h for h in fleet.client.hits if h.sent > at + 1 and h.code in (0, HUNG, 502, 503)]
    assert late == [], late
    figure("web kill: socket reconnected through HAProxy", f"{reconnect[0]:.1f} s after the kill")
    figure("web kill: first step on the socket after the kill", f"{_socket_gap(watcher, at):.1f} s")
    figure("web kill: API requests failed", f"{len(errors)} (in flight on the killed process)")
    # Back as a supervisor would restart it, for the tests that follow.
    fleet.sv.spawn(killed[0])
    wait_port(fleet.web_ports[killed[0]], 120, proc=fleet.sv.procs[killed[0]])


def test_a_redis_primary_failover_loses_no_run_and_the_socket_stays_live(fleet):
    old = fleet.group.primary_address()
    moved = {}

    def fail_over(watcher: Watcher) -> None:
        killed_at = time.monotonic()
        fleet.group.kill_primary()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.RedisError):
                if fleet.group.primary_address() != old:
                    moved["after"] = time.monotonic() - killed_at
                    return
            time.sleep(0.1)

    watcher, _, at = _through_a_fault(fleet, "Redis failover", fail_over)
    assert "after" in moved, f"the sentinels did not promote the replica of {MASTER}"
    errors = _errors(fleet.client, at)
    figure("Redis failover: replica promoted", f"{moved['after']:.1f} s after the kill")
    figure("Redis failover: first step on the socket", f"{_socket_gap(watcher, at):.1f} s")
    figure("Redis failover: API requests failed", f"{len(errors)} {errors[:3]}")
    # Once the replica is promoted every process follows it: no request fails after that.
    promoted = at + moved["after"] + 5
    late = [
        h for h in fleet.client.hits if h.sent > promoted and h.code in (0, HUNG, 500, 502, 503)
    ]
    assert late == [], late


def test_a_worker_killed_and_a_postgres_restart_lose_no_run(fleet):
    restarted = []

    def kill_worker_restart_postgres(watcher: Watcher) -> None:
        fleet.sv.kill("worker1")  # SIGKILL: its runs' leases expire, the sweep re-sends them
        time.sleep(1)
        fleet.sv.spawn("worker1")
        fleet.cluster.restart("fast")  # every server connection of PgBouncer ends
        restarted.append(time.monotonic())

    watcher, launches, at = _through_a_fault(
        fleet, "worker kill + Postgres restart", kill_worker_restart_postgres
    )
    # The longest any run of this test went without a step, after the fault.
    ids = [launch.run_id for launch in launches] + [watcher.run_id]
    rows = fleet.sql(
        "select run_id::text, created_at from runs_step where run_id::text = any(%s)"
        " order by run_id, seq",
        ids,
    )
    longest = 0.0
    for (run_a, t_a), (run_b, t_b) in itertools.pairwise(rows):
        if run_a == run_b:
            longest = max(longest, (t_b - t_a).total_seconds())
    figure("worker kill + Postgres restart: longest a run went without a step", f"{longest:.1f} s")
    # A dead worker's run resumes within 1.5 leases of its last step; the restart and a
    # starved machine add to it, a run left behind would not.
    assert longest < 60, f"a run went {longest:.0f} s without a step"
    errors = _errors(fleet.client, at)
    figure("worker kill + Postgres restart: API requests failed", f"{len(errors)} {errors[:3]}")
    # Failures only while Postgres restarts: PgBouncer reconnects, the pools check.
    # (By when each request was sent: one sent during the restart may hang until its timeout.)
    late = [h for h in fleet.client.hits if h.sent > restarted[0] + 5 and h.code in (0, HUNG, 500)]
    assert late == [], late


def test_a_standby_beat_takes_over_when_the_leader_dies(fleet):
    leads = fleet.beat_leads()
    leader = next(name for name, n in leads.items() if n)
    standby = next(name for name in leads if name != leader)
    before = leads[standby]
    at = time.monotonic()
    fleet.sv.kill(leader)  # SIGKILL: the lock is not released, it expires
    deadline = at + BEAT_LOCK * 4 + 10
    while fleet.beat_leads()[standby] == before and time.monotonic() < deadline:
        time.sleep(0.2)
    took = time.monotonic() - at
    assert fleet.beat_leads()[standby] > before, f"{standby} never took the lead"
    figure("beat death: the standby leads", f"{took:.1f} s after the kill (lock {BEAT_LOCK} s)")
    fleet.sv.spawn(leader)


def test_approvals_queue_and_a_run_export_work_through_pgbouncer(fleet):
    cookie = {"Cookie": f"sessionid={fleet.sessions['approver']}"}
    # A gated run the approver has not decided: stop the approver for one launch.
    fleet.chaos.st.stop.set()
    time.sleep(1)
    launch = fleet.chaos.launch(steps=1, gate=True, timeout=60)
    assert launch.acknowledged
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = fleet.statuses([launch.run_id]).get(launch.run_id)
        if status == "waiting":
            break
        time.sleep(0.3)
    assert status == "waiting", f"the gated run is {status}"
    queue = _get(fleet, "/approvals/", cookie)
    assert queue.status == 200
    assert b"chaos_transfer" in queue.body  # the one call waiting for a person
    done = [la for la in fleet.launches if la.acknowledged]
    run_id = done[0].run_id
    export = _get(fleet, f"/runs/{run_id}/export.jsonl", cookie)
    assert export.status == 200
    lines = export.body.decode().splitlines()
    steps = fleet.sql("select count(*) from runs_step where run_id = %s", run_id)[0][0]
    checkpoints = fleet.sql("select count(*) from runs_checkpoint where run_id = %s", run_id)[0][0]
    assert len(lines) == 1 + steps + checkpoints
    assert all(json.loads(line) for line in lines)
    figure("through PgBouncer: approvals queue, run export", f"200, 200 ({len(lines)} lines)")


def test_no_effect_happened_twice_and_every_completed_run_made_its_calls(fleet):
    ledger = effect_ledger.read(fleet.sv.env["CHAOS_EFFECTS_DB"])
    assert ledger.dup_key == {}
    assert ledger.dup_ref == {}
    ids = [la.run_id for la in fleet.launches if la.acknowledged]
    rows = fleet.sql(
        "select id::text, input, termination_reason from runs_run where id::text = any(%s)", ids
    )
    missing = []
    for run_id, data, reason in rows:
        if reason != "completed":
            continue
        for ref in effect_ledger.expected_refs(data["tag"], int(data["steps"]), data["gate"]):
            if (run_id, ref) not in ledger.per_ref:
                missing.append(ref)
    assert missing == []
    completed = sum(1 for *_, reason in rows if reason == "completed")
    figure(
        "all tests: runs, effects",
        f"{len(ids)} runs ({completed} completed), {len(ledger.effects)} effects, 0 duplicates",
    )


@dataclass
class Answer:
    status: int
    body: bytes


def _get(fleet: Fleet, path: str, headers: dict[str, str]) -> Answer:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(fleet.client.base + path, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return Answer(response.status, response.read())
    except urllib.error.HTTPError as exc:
        return Answer(exc.code, exc.read())
