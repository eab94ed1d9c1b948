"""The database connection: a dead pooled connection is never handed out, a live one is handed
out without a round trip, and a request that arrives while the database is down gets 503 with
Retry-After, never 500."""

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest
from django.db import OperationalError, connection
from django.test import Client
from psycopg_pool import ConnectionPool
from psycopg_pool.base import AttemptWithBackoff

from accounts.models import ApiToken
from agentops.db.postgresql import base as pooled_postgres
from runs.models import Run, RunQuerySet
from tests.conftest import on_postgres
from tests.runs.factories import make_run
from tests.support.postgres_cluster import free_port


def _fresh_pool() -> None:
    """A pool of its min_size (2) idle connections, as a web process holds at rest.

    psycopg_pool waits with a growing backoff after each dead connection it finds (about
    1, 2, 4 ... s), so a pool that earlier tests grew to its max_size of dead connections
    would take the request past the pool timeout (503): what is tested here is that no dead
    connection is handed out, with the pool of a process at rest."""
    connection.close()
    connection.close_pool()
    Run.objects.exists()  # opens the new pool
    connection.close()
    connection.pool.wait(timeout=10)


def _terminate_the_pools_backends() -> int:
    """What a Postgres restart does to the pool: every connection it holds dies at once.

    Only the pool's own backends: killing every backend of the test database also killed
    connections other threads of this process held (a live server's, an async consumer's),
    and a later test failed on one with "terminating connection due to administrator command".
    """
    pool = connection.pool
    held = [pool.getconn() for _ in range(pool.min_size)]
    pids = [conn.info.backend_pid for conn in held]
    for conn in held:
        pool.putconn(conn)
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    params.pop("prepare_threshold", None)
    with psycopg.connect(**params, autocommit=True) as killer:
        # With a timeout, pg_terminate_backend waits until each backend is gone, as a restart
        # does before it lets anyone connect again.
        killed = killer.execute(
            "SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity"
            " WHERE pid = ANY(%s)",
            [pids],
        ).fetchone()[0]
    return killed


@pytest.fixture
def round_trip_checks(monkeypatch) -> list:
    """The connections the pool checked with a query (psycopg_pool's check_connection)."""
    checked = []
    real = ConnectionPool.check_connection

    def counting(conn):
        checked.append(conn)
        real(conn)

    monkeypatch.setattr(ConnectionPool, "check_connection", staticmethod(counting))
    return checked


@pytest.fixture
def pool_of_two(monkeypatch):
    """A pool that never grows, so its two connections are handed out in turn."""
    options = connection.settings_dict["OPTIONS"]
    monkeypatch.setitem(options, "pool", {**options["pool"], "min_size": 2, "max_size": 2})
    _fresh_pool()
    yield
    connection.close()
    connection.close_pool()  # the next test builds the configured one


def _checkouts(n: int, query=lambda: Run.objects.count()) -> None:
    for _ in range(n):
        query()
        connection.close()  # back to the pool


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_a_live_pooled_connection_is_handed_out_without_a_round_trip(
    pool_of_two, round_trip_checks
):
    _checkouts(2)  # each of the pool's connections handed out once: checked, as in doubt
    round_trip_checks.clear()
    _checkouts(20)
    assert round_trip_checks == []


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_a_connection_idle_for_a_while_is_checked_with_a_query(
    pool_of_two, round_trip_checks, monkeypatch
):
    _checkouts(2)
    round_trip_checks.clear()
    monkeypatch.setattr(pooled_postgres, "CHECK_AFTER_IDLE_SECONDS", 0.0)
    _checkouts(3)
    assert len(round_trip_checks) == 3


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_the_next_query_succeeds_after_every_pooled_connection_was_killed():
    _fresh_pool()
    assert _terminate_the_pools_backends() >= 2
    for _ in range(4):  # more than the pool held: each dead one would have failed once
        assert Run.objects.count() == 0
        connection.close()


# --- a real restart, of a Postgres cluster of the test's own --------------------------------------
def _pg_bindir() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@pytest.fixture(scope="module")
def own_postgres():
    """A Postgres cluster on a free port, started and stopped here (the shared server is
    never restarted); yields (port, restart(mode))."""
    bindir = _pg_bindir()
    if bindir is None:
        pytest.skip("no initdb (PostgreSQL server binaries) on this machine")
    # Not under pytest's tmp_path: its parents are private to root, and Postgres refuses to
    # run as root, so the cluster belongs to the postgres user (chaos.py does the same).
    tmp = Path(tempfile.mkdtemp(prefix="agentops-test-pg-"))
    data, sockets = tmp / "data", tmp / "sock"
    as_root = os.geteuid() == 0
    data.mkdir(mode=0o700)
    sockets.mkdir(mode=0o700)
    if as_root:
        for d in (tmp, data, sockets):
            shutil.chown(d, "postgres", "postgres")

    def pg(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [str(bindir / argv[0]), *argv[1:]]
        if as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(
            cmd, cwd=tmp, capture_output=True, text=True, check=check, timeout=120
        )

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pg("initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
    opts = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off"
    log = str(tmp / "pg.log")
    pg("pg_ctl", "-D", str(data), "-l", log, "-o", opts, "-w", "-t", "60", "start")

    def restart(mode: str) -> None:
        pg("pg_ctl", "-D", str(data), "-l", log, "-m", mode, "-w", "-t", "60", "restart")

    try:
        yield port, restart
    finally:
        stopped = pg("pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop", check=False)
        pidfile = data / "postmaster.pid"
        if stopped.returncode != 0 and pidfile.exists():
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pidfile.read_text().split()[0]), signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_after_a_postgres_restart_the_pool_replaces_its_dead_connections(
    own_postgres, round_trip_checks, django_db_blocker, mode
):
    port, restart = own_postgres
    settings_dict = {
        **connection.settings_dict,
        "ENGINE": "agentops.db.postgresql",
        "NAME": "postgres",
        "USER": "postgres",
        "PASSWORD": "",
        "HOST": "127.0.0.1",
        "PORT": str(port),
        # Fixed size, so its connections are handed out in turn.
        "OPTIONS": {"pool": {"min_size": 2, "max_size": 2, "timeout": 30}},
        "CONN_MAX_AGE": 0,
        "CONN_HEALTH_CHECKS": True,
    }

    def scenario() -> None:
        db = pooled_postgres.DatabaseWrapper(settings_dict, alias=f"own-postgres-{mode}")

        def query() -> int:
            with db.cursor() as cursor:
                cursor.execute("SELECT 1")
                return cursor.fetchone()[0]

        with contextlib.ExitStack() as cleanup:
            cleanup.callback(db.close_pool)
            cleanup.callback(db.close)
            assert query() == 1  # opens the pool
            db.close()
            db.pool.wait(timeout=10)
            # Each of its connections handed out once: checked, as in doubt.
            for _ in range(2):
                query()
                db.close()
            round_trip_checks.clear()
            for _ in range(10):
                query()
                db.close()
            assert round_trip_checks == []  # alive: no query to find that out

            restart(mode)
            for _ in range(4):  # more than the pool held: each dead one would have failed once
                assert query() == 1
                db.close()
            # The dead ones were found by the query check that a readable socket led to.
            assert round_trip_checks

    # In a thread of its own, as a worker's: the browser tests leave an event loop running in
    # the main thread, where Django refuses database calls. Not the test database: a cluster
    # of its own, which pytest-django does not know about.
    with django_db_blocker.unblock(), ThreadPoolExecutor(max_workers=1) as thread:
        thread.submit(scenario).result()


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_api_requests_succeed_after_every_pooled_connection_was_killed(operator):
    _, raw = ApiToken.issue(operator, "tests")
    client = Client(headers={"Authorization": f"Bearer {raw}"})
    _fresh_pool()
    assert _terminate_the_pools_backends() >= 2
    statuses = [client.get("/api/runs").status_code for _ in range(4)]
    assert statuses == [200] * 4


@pytest.fixture
def database_down(monkeypatch):
    """Every visible-runs query fails as it would with Postgres down."""

    def refuse(self, user):
        raise OperationalError("connection failed: Connection refused")

    monkeypatch.setattr(RunQuerySet, "visible_to", refuse)


@pytest.mark.django_db
@pytest.mark.parametrize("debug", [False, True])
def test_an_api_request_while_the_database_is_down_is_503_with_retry_after(
    operator, database_down, settings, debug, caplog
):
    settings.DEBUG = debug  # with DEBUG on, ninja would answer a 500 with the traceback
    _, raw = ApiToken.issue(operator, "tests")
    client = Client(headers={"Authorization": f"Bearer {raw}"})
    response = client.get("/api/runs")
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response["Content-Type"] == "application/problem+json"
    problem = response.json()
    assert (problem["type"], problem["status"]) == ("urn:agentops:problem:unavailable", 503)
    assert problem["detail"] == "the database is unavailable; retry in a few seconds"
    assert "Connection refused" in caplog.text


@pytest.mark.django_db
def test_a_page_request_while_the_database_is_down_is_503_with_retry_after(
    operator, database_down, caplog
):
    client = Client()
    client.force_login(operator)
    response = client.get("/runs/")
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response["Content-Type"].startswith("text/plain")
    assert response.content.decode() == "the database is unavailable; retry in a few seconds"
    assert "Connection refused" in caplog.text


@pytest.mark.django_db
def test_other_errors_are_still_500(operator, monkeypatch):
    def broken(self, user):
        raise ValueError("a bug")

    monkeypatch.setattr(RunQuerySet, "visible_to", broken)
    client = Client(raise_request_exception=False)
    client.force_login(operator)
    assert client.get("/runs/").status_code == 500


# --- after a restart: retried soon, every dead connection dropped at once (issue 39) ------------
def test_a_missing_connection_is_tried_again_within_seconds_however_long_it_failed(monkeypatch):
    """psycopg_pool doubles its pause after each failed attempt (1, 2, 4 ... 128 s): after a
    few restarts in a row the pool's next attempt was minutes away while Postgres was back."""
    port = free_port()  # nothing listens there: every attempt is refused at once
    pool = pooled_postgres.Pool(
        kwargs={"host": "127.0.0.1", "port": port, "user": "postgres", "dbname": "postgres"},
        min_size=1,
        open=False,
    )
    scheduled = []
    monkeypatch.setattr(
        ConnectionPool, "schedule_task", lambda self, task, delay: scheduled.append(task)
    )
    attempt = AttemptWithBackoff(timeout=300)
    now = time.monotonic()
    for _ in range(6):  # failed for a minute already: psycopg_pool's next pause would be 64 s
        attempt.update_delay(now)
    for _ in range(3):
        pool._add_connection(attempt)  # what AddConnection runs: a connection refused
        assert scheduled[-1].attempt.delay <= pooled_postgres.RECONNECT_DELAY_MAX_SECONDS
    assert len(scheduled) == 3


@pytest.fixture
def pool_of_four(monkeypatch):
    options = connection.settings_dict["OPTIONS"]
    monkeypatch.setitem(options, "pool", {**options["pool"], "min_size": 4, "max_size": 4})
    _fresh_pool()
    yield
    connection.close()
    connection.close_pool()


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_one_dead_connection_found_at_checkout_drops_every_dead_idle_one(pool_of_four):
    """Each dead connection a checkout finds costs it a pause of 1, 2, 4, 8 s before the next
    (psycopg_pool's backoff): a quiet process found them one after the other and ran out of
    time (a sweep, an approver's list). The first one found has the others checked at once."""
    assert _terminate_the_pools_backends() >= 4
    started = time.monotonic()
    assert Run.objects.count() == 0
    took = time.monotonic() - started
    connection.close()
    assert took < 4.0, f"the checkout took {took:.1f} s past the pool's dead connections"
    assert connection.pool.get_stats()["connections_lost"] >= 4


@pytest.mark.django_db
def test_the_database_failing_while_an_answer_is_serialised_is_503(operator, monkeypatch, caplog):
    """An attribute read as the answer is validated (a foreign key, a resolver) meets the
    database gone: pydantic wraps the error, which was a 500 (seen by the chaos bench)."""
    make_run(operator)

    def gone(self):
        raise OperationalError("consuming input failed: server closed the connection")

    monkeypatch.setattr(Run, "is_scripted", property(gone))
    _, raw = ApiToken.issue(operator, "tests")
    client = Client(headers={"Authorization": f"Bearer {raw}"}, raise_request_exception=False)
    response = client.get("/api/runs")
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert "server closed the connection" in caplog.text


@pytest.mark.django_db
def test_an_answer_that_fails_validation_for_another_reason_is_still_500(operator, monkeypatch):
    make_run(operator)

    def broken(self):
        raise ValueError("a bug")

    monkeypatch.setattr(Run, "is_scripted", property(broken))
    _, raw = ApiToken.issue(operator, "tests")
    client = Client(headers={"Authorization": f"Bearer {raw}"}, raise_request_exception=False)
    assert client.get("/api/runs").status_code == 500
