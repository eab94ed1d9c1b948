"""A live agentops for tests that need the real thing: `manage.py up` in a subprocess.

Used by tests/test_up.py and the browser suite (tests/e2e). The server gets a fresh var dir
(its own SQLite database and shop) and embedded topology: daphne, an in-process Celery worker
on the memory transport, the in-memory channel layer.
"""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Settings that would take `up` out of embedded mode or out of DEBUG.
NOT_INHERITED = ("DATABASE_URL", "REDIS_URL", "DEBUG", "SECRET_KEY", "ALLOWED_HOSTS")
# Generous (`up` gives running tasks 5 s, --shutdown-grace): only a server that ignores
# SIGTERM reaches it.
STOP_DEADLINE = 60


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class UpServer:
    proc: subprocess.Popen
    url: str
    var_dir: Path
    env: dict
    lines: list[str] = field(default_factory=list)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def manage(self, code: str) -> str:
        """Run Python in a second process against the same database."""
        proc = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", code],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout


def start_up(var_dir: Path, *args: str, **extra_env: str) -> UpServer:
    """Serve on a free port; returns once /healthz answers. `extra_env` may set back what
    NOT_INHERITED leaves out (e.g. DATABASE_URL and REDIS_URL for the production topology)."""
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    env.update(AGENTOPS_VAR_DIR=str(var_dir), PYTHONUNBUFFERED="1", **extra_env)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "up", f"127.0.0.1:{port}", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    server = UpServer(proc=proc, url=f"http://127.0.0.1:{port}", var_dir=var_dir, env=env)
    # Drain the pipe continuously: a full pipe would block the server.
    threading.Thread(target=lambda: server.lines.extend(proc.stdout), daemon=True).start()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"up exited with {proc.returncode}:\n{server.output}")
        try:
            with opener().open(server.url + "/healthz", timeout=2) as response:
                if response.status == 200:
                    return server
        except OSError:
            time.sleep(0.2)
    proc.kill()
    pytest.fail(f"up did not serve /healthz within 300 s:\n{server.output}")


def stop_up(server: UpServer) -> None:
    """SIGTERM, then wait for the exit; fails the test if it never comes (STOP_DEADLINE)."""
    server.proc.send_signal(signal.SIGTERM)
    try:
        server.proc.wait(timeout=STOP_DEADLINE)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()
        pytest.fail(f"up did not exit within {STOP_DEADLINE} s of SIGTERM:\n{server.output}")


def kill_up(server: UpServer) -> None:
    """Teardown: make sure the subprocess is gone, whatever the test did."""
    if server.proc.poll() is None:
        server.proc.kill()
        server.proc.wait()


def opener(jar=None) -> urllib.request.OpenerDirector:
    # No proxy: the server is on 127.0.0.1 and a proxy from the environment would not reach it.
    handlers: list = [urllib.request.ProxyHandler({})]
    if jar is not None:
        handlers.append(urllib.request.HTTPCookieProcessor(jar))
    return urllib.request.build_opener(*handlers)
