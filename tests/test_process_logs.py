"""Every line JSON with LOG_FORMAT=json, in every process kind, as production starts them:
daphne (its access lines, with the request id), a Celery worker (its banner, the warning a
worker run as root gets, its shutdown line) and beat (its banners). Real processes on the
test database and Redis, for a few seconds each; every non-empty line of their output must
parse as JSON."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from django.conf import settings

from tests.livesupport import free_port, opener
from tests.runs.worker_processes import BASE_DIR, worker_env

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL=redis://… (broker, beat)"),
]

START_SECONDS = 180  # three Django processes starting at once on a small, busy machine


class Process:
    def __init__(self, *args: str, env: dict):
        self.proc = subprocess.Popen(
            [sys.executable, *args],
            cwd=BASE_DIR,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        # Drained as it comes: a full pipe would block the process.
        threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True).start()

    def said(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        time.sleep(0.2)  # the reader thread takes the last lines

    def records(self) -> list[dict]:
        found = []
        for line in self.lines:
            if line.strip():
                try:
                    found.append(json.loads(line))
                except ValueError:
                    pytest.fail(f"not JSON: {line!r}\n{''.join(self.lines)}")
        return found


def _wait(until, what: str, processes: list[Process]) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if until():
            return
        for process in processes:
            if process.proc.poll() is not None:
                pytest.fail(f"a process exited:\n{''.join(process.lines)}")
        time.sleep(0.5)
    pytest.fail(f"{what} not within {START_SECONDS} s")


def _answers(url: str, **headers: str) -> bool:
    try:
        with opener().open(urllib.request.Request(url, headers=headers), timeout=5):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def test_every_line_of_daphne_a_worker_and_beat_is_json(tmp_path):
    from agentops.celery import app

    env = worker_env(
        LOG_FORMAT="json",
        LOG_LEVEL="INFO",
        PYTHONUNBUFFERED="1",
        AGENTOPS_VAR_DIR=str(tmp_path),
        CELERY_TASK_ALWAYS_EAGER="false",
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    web = Process("-m", "daphne", "-p", str(port), "agentops.asgi:application", env=env)
    worker = Process(
        "-m", "celery", "-A", "agentops", "worker", "--pool", "threads", "--concurrency", "2",
        "--without-heartbeat", "--without-mingle", "--without-gossip", "--loglevel", "INFO",
        env=env,
    )  # fmt: skip
    beat = Process("-m", "celery", "-A", "agentops", "beat", "--loglevel", "INFO", env=env)
    processes = [web, worker, beat]
    try:
        _wait(lambda: _answers(url + "/healthz"), "daphne's answer", processes)
        assert _answers(url + "/healthz", **{"X-Request-ID": "req-from-the-balancer"})
        assert _answers(url + "/no-such-page/")
        _wait(lambda: worker.said("ready"), "the worker's ready line", processes)
        _wait(lambda: beat.said("celery beat starting"), "beat's start", processes)
        time.sleep(1)
    finally:
        for process in processes:
            process.stop()
        app.control.purge()  # what beat sent, for nobody

    access = [r for r in web.records() if r["logger"] == "agentops.access"]
    given = [r for r in access if r["request_id"] == "req-from-the-balancer"]
    assert given and given[0]["path"] == "/healthz" and given[0]["method"] == "GET"
    assert given[0]["status"] in (200, 503) and given[0]["duration_ms"] >= 0
    (missing,) = [r for r in access if r["path"] == "/no-such-page/"]
    assert missing["status"] == 404 and len(missing["request_id"]) == 32
    # django.request's line about the 404 carries the same request id.
    assert any(
        r["logger"] == "django.request" and r.get("request_id") == missing["request_id"]
        for r in web.records()
    )

    messages = [r["message"] for r in worker.records()]
    assert any(m.startswith("celery worker ") and "[queues]" in m for m in messages)
    assert any("Warm shutdown" in m for m in messages)
    if os.geteuid() == 0:
        assert any(r["logger"] == "py.warnings" for r in worker.records())
    assert any(r["message"].startswith("celery beat starting") for r in beat.records())
