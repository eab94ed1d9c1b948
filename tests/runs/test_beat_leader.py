"""Beat without a single point of failure (celery-redbeat's lock, agentops/beat.py): two
`celery beat` processes, one schedules; killed, the other takes over within the lock's time;
a Redis that stops and comes back empty leaves the beat running and scheduling again."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import redis
from django.conf import settings

from tests.support.postgres_cluster import free_port
from tests.support.redis_sentinel import redis_server

pytestmark = pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL")

LOCK_SECONDS = 3


def beat(tmp_path, name: str, redis_url: str | None = None) -> subprocess.Popen:
    log = tmp_path / f"{name}.log"
    env = {
        **os.environ,
        "REDIS_URL": redis_url or settings.REDIS_URL,
        "AGENTOPS_SWEEP_SECONDS": "1",
        "AGENTOPS_BEAT_LOCK_SECONDS": str(LOCK_SECONDS),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "agentops", "beat", "--loglevel", "INFO",
         "--schedule", str(tmp_path / name)],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )  # fmt: skip


def senders(client: redis.Redis) -> list[int]:
    """The pids of the processes that sent the sweeps now waiting, oldest first, emptying
    the queue."""
    pids = []
    while raw := client.rpop("sweeps"):
        origin = json.loads(raw)["headers"]["origin"]  # gen<pid>@<host>
        pids.append(int(origin.split("@")[0].removeprefix("gen")))
    return pids


def wait_for_sender(client: redis.Redis, pid: int, within: float) -> list[int]:
    seen: list[int] = []
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        seen += senders(client)
        if pid in seen:
            return seen
        time.sleep(0.2)
    raise AssertionError(f"no sweep sent by {pid} within {within} s (senders: {set(seen)})")


def wait_until_started(log) -> None:
    """Until the beat printed its banner: Django loaded, it is about to wait on the lock."""
    deadline = time.monotonic() + 240  # a loaded runner starts a beat slowly
    while b"Configuration ->" not in log.read_bytes():
        assert time.monotonic() < deadline, log.read_text()[-2000:]
        time.sleep(0.5)


@pytest.mark.timeout(900)
def test_one_beat_schedules_and_a_standby_takes_over(tmp_path):
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete("sweeps")
    first = beat(tmp_path, "a")
    second = None
    try:
        wait_for_sender(client, first.pid, within=240)  # a loaded runner starts slowly
        second = beat(tmp_path, "b")
        wait_until_started(tmp_path / "b.log")
        senders(client)
        time.sleep(4)  # both running: only the lock's holder sends
        while_both = senders(client)
        assert while_both and set(while_both) == {first.pid}

        first.send_signal(signal.SIGKILL)  # no release of its lock: it must expire
        first.wait(10)
        senders(client)
        seen = wait_for_sender(client, second.pid, within=LOCK_SECONDS + 30)
        assert first.pid not in seen[seen.index(second.pid) :]
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(10)
        client.delete("sweeps")


@pytest.mark.timeout(900)
def test_the_beat_outlives_a_redis_that_restarts_empty(tmp_path):
    port = free_port()
    argv = [redis_server(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", str(tmp_path)]  # fmt: skip
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    client = redis.Redis(port=port, socket_timeout=5)
    process = None
    try:
        wait_for_redis(client)
        process = beat(tmp_path, "a", redis_url=f"redis://127.0.0.1:{port}/0")
        wait_for_sender(client, process.pid, within=240)

        server.terminate()  # SIGTERM: Redis shuts down, keeping nothing
        server.wait(10)
        time.sleep(LOCK_SECONDS)  # ticks meet a refused connection
        assert process.poll() is None, (tmp_path / "a.log").read_text()[-3000:]

        server = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
        wait_for_redis(client)
        # An empty Redis (no lock, no schedule): any sweep in it was sent after the restart.
        wait_for_sender(client, process.pid, within=LOCK_SECONDS + 30)
        assert client.exists("redbeat::lock")  # it leads again
    finally:
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(10)
        server.terminate()
        server.wait(10)


def wait_for_redis(client: redis.Redis) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            client.ping()
            return
        except redis.ConnectionError:
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.1)
