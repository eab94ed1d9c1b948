"""A web process's connection pool after Postgres restarts under load (issue 39): every
request is served again within a few seconds of Postgres being back, and no connection is
left checked out of the pool once the requests are over.

A real daphne serves GET /api/runs and /api/approvals to clients that give up after a short
timeout (as the chaos bench's and a browser's do) while a Postgres cluster of the test's own
restarts and stays down for a while, several times. Requests pile up waiting for a connection;
their clients leave; daphne cancels them (`--application-close-timeout`, shortened here from
its 10 s so the test takes seconds, not minutes) while their views still wait in their threads.
Before the fix, each of those views later got a connection and its thread ended holding it:
the pool lost them all, and every request failed after its 30 s wait for as long as daphne
lived, while Postgres answered at once.
"""

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.postgres_cluster import Cluster, bindir, free_port

ROOT = Path(__file__).resolve().parent.parent
CLIENTS = 40
CLIENT_TIMEOUT = 2.0
CLOSE_TIMEOUT = 2  # daphne's --application-close-timeout
DOWN_SECONDS = 6.0
# Postgres back, every request served within this long (the pool retries at most 2 s apart).
RECOVERY_SECONDS = 5.0
WATCH_SECONDS = 10.0

SETUP = """
import django
django.setup()
from django.core.management import call_command
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from accounts.models import ApiToken
call_command("migrate", verbosity=0)
user = get_user_model().objects.create_user(username="pool-test")
user.groups.add(*Group.objects.all())
print(ApiToken.issue(user, "pool-test")[1])
"""


@pytest.fixture
def cluster():
    found = bindir()
    if found is None:
        pytest.skip("no initdb (PostgreSQL server binaries) on this machine")
    cluster = Cluster(found)
    try:
        cluster.init()
        subprocess.run(
            [
                *(["runuser", "-u", "postgres", "--"] if cluster.as_root else []),
                str(found / "psql"),
                "-h", "127.0.0.1", "-p", str(cluster.port), "-U", "postgres",
                "-c", "create database agentops_pool",
            ],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        yield cluster
    finally:
        cluster.destroy()


def _env(cluster: Cluster) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "REDIS_"))}
    env.update(
        DATABASE_URL=cluster.url("agentops_pool"),
        DJANGO_SETTINGS_MODULE="agentops.settings",
        DEBUG="false",
        SECRET_KEY="pool-restarts-" + "x" * 50,
        ALLOWED_HOSTS="127.0.0.1",
        SECURE_SSL_REDIRECT="false",
        AGENTOPS_VAR_DIR=str(cluster.tmp / "var"),
        PYTHONPATH=str(ROOT),
    )
    return env


@pytest.fixture
def daphne(cluster):
    """(base URL, API token) of a daphne on the cluster's database."""
    env = _env(cluster)
    setup = subprocess.run(
        [sys.executable, "-c", SETUP], env=env, cwd=ROOT, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert setup.returncode == 0, setup.stderr[-3000:]
    token = setup.stdout.strip().splitlines()[-1]
    port = free_port()
    log = open(cluster.tmp / "daphne.log", "wb")  # noqa: SIM115 (the child holds it)
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
            "--application-close-timeout", str(CLOSE_TIMEOUT),
            "tests.support.pool_stats_app:application",
        ],
        env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    log.close()
    base = f"http://127.0.0.1:{port}"
    try:
        # Bounded by daphne itself: waited for while it lives, up to a starved machine's worst.
        deadline = time.monotonic() + 180
        while _stats(base) is None:
            assert proc.poll() is None, (cluster.tmp / "daphne.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "daphne did not answer"
            time.sleep(0.5)
        # The first request imports and builds what later ones reuse: not under the clients'
        # short timeout.
        warm_up = urllib.request.Request(
            f"{base}/api/runs", headers={"Authorization": f"Bearer {token}"}
        )
        with urllib.request.urlopen(warm_up, timeout=120) as response:
            assert response.status == 200
        yield base, token
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _stats(base: str) -> dict | None:
    try:
        with urllib.request.urlopen(f"{base}/-/pool", timeout=5) as response:
            return json.loads(response.read())
    except OSError:
        return None


class Load:
    """CLIENTS threads asking GET /api/runs and /api/approvals in turn, each request recorded
    as (started, ended, status; -1 for no answer within CLIENT_TIMEOUT)."""

    def __init__(self, base: str, token: str):
        self.base, self.token = base, token
        self.hits: list[tuple[float, float, int]] = []
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self.client, daemon=True) for _ in range(CLIENTS)]

    def client(self) -> None:
        paths = ("/api/runs", "/api/approvals")
        n = 0
        while not self.stopping.is_set():
            request = urllib.request.Request(
                self.base + paths[n % 2], headers={"Authorization": f"Bearer {self.token}"}
            )
            n += 1
            started = time.monotonic()
            try:
                with urllib.request.urlopen(request, timeout=CLIENT_TIMEOUT) as response:
                    status = response.status
            except urllib.error.HTTPError as exc:
                status = exc.code
            except OSError:
                status = -1
            self.hits.append((started, time.monotonic(), status))
            if status != 200:
                time.sleep(0.2)

    def __enter__(self) -> "Load":
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=CLIENT_TIMEOUT + 5)


def test_every_request_is_served_soon_after_postgres_restarts_and_no_connection_leaks(
    cluster, daphne
):
    base, token = daphne
    with Load(base, token) as load:
        time.sleep(3)
        served = [status for _, _, status in load.hits if status == 200]
        assert served, f"not served before any fault: {load.hits[-5:]}"
        cluster.restart("fast")
        time.sleep(1)
        cluster.down_for(DOWN_SECONDS, "fast")
        time.sleep(1)
        cluster.restart("immediate")
        time.sleep(1)
        cluster.down_for(DOWN_SECONDS, "immediate")
        back = time.monotonic()  # pg_ctl start -w: accepting connections
        time.sleep(RECOVERY_SECONDS + WATCH_SECONDS)
    late = [(s, e, status) for s, e, status in load.hits if s >= back + RECOVERY_SECONDS]
    failed = [(round(s - back, 1), status) for s, _, status in late if status != 200]
    stats = _stats(base)
    assert len(late) >= CLIENTS, f"too few requests after recovery: {len(late)} ({stats})"
    assert failed == [], (
        f"{len(failed)} of {len(late)} requests started {RECOVERY_SECONDS:.0f} s or more after"
        f" Postgres was back failed (s after, status): {failed[:10]}; pool: {stats}"
    )
    # The requests are over (the abandoned ones wait at most the pool's 30 s): every
    # connection is back in the pool.
    deadline = time.monotonic() + 45
    while (stats := _stats(base))["checked_out"] and time.monotonic() < deadline:
        time.sleep(1)
    assert stats["checked_out"] == 0, f"connections left checked out of the pool: {stats}"
