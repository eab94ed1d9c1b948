"""Worker processes of the tests' own: a one-shot engine worker (tests/runs/worker_process.py)
and real Celery workers (tests/runs/worker_app.py), on the test database and shop."""

import os
import signal
import subprocess
import sys
from pathlib import Path

from django.conf import settings
from django.db import connections

BASE_DIR = Path(settings.BASE_DIR)


def database_url() -> str:
    """The test database as a URL another process can open (SQLite: the same file)."""
    db = connections["default"].settings_dict
    if connections["default"].vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return f"postgres://{db['USER']}{password}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def worker_env(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": database_url(),
        "AGENTOPS_SHOP_DB": settings.AGENTOPS["SHOP_DB"],
        "TEST_KILL_AFTER_TOOL": "",
        "CELERY_TASK_ALWAYS_EAGER": "true",
        "LOG_LEVEL": "WARNING",
        **extra,
    }


def one_shot(*args: str, **env: str) -> subprocess.Popen:
    """`python -m tests.runs.worker_process <args>`; the caller communicate()s with it."""
    # The test process must not hold the database while another process writes it.
    connections.close_all()
    return subprocess.Popen(
        [sys.executable, "-m", "tests.runs.worker_process", *args],
        cwd=BASE_DIR,
        env=worker_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def celery_worker(name: str, *, concurrency: int = 4, **env: str) -> subprocess.Popen:
    """A Celery worker (threads pool) named `name@host`, consuming from the Redis broker."""
    connections.close_all()
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tests.runs.worker_app",
            "worker",
            "--pool",
            "threads",
            "--concurrency",
            str(concurrency),
            "--hostname",
            f"{name}@%h",
            "--without-heartbeat",
            "--without-mingle",
            "--without-gossip",
            "--loglevel",
            "WARNING",
        ],
        cwd=BASE_DIR,
        env=worker_env(**{"CELERY_TASK_ALWAYS_EAGER": "false", **env}),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop(process: subprocess.Popen) -> None:
    """A warm shutdown (SIGTERM), killed if it takes over 30 s."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
