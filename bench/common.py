"""What every bench reports beside its wall times, and the real server some of them start.

`machine()` is the line each bench prints before and after: the load average (the machine is
shared, so other work shows in every wall time) and this process's own CPU time so far.
`cpu_seconds(pid)` reads another process's CPU (the server, a worker) from /proc.
`serve()` starts `manage.py up` (daphne, the production request stack) as a subprocess on a
free port, the way tests/livesupport.py does, and returns once /healthz answers; the caller
stops it by its PID with `stop()`.
"""

import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.client import HTTPConnection
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def percentile(values: list[float], q: float) -> float:
    """q in 0..1, nearest rank; nan for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def own_cpu_seconds() -> float:
    """User + system CPU of this process, every thread, so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine(**others: int) -> str:
    """'load 3.1 2.9 2.7 (2 CPUs), bench CPU 4.2 s, server CPU 9.1 s' — `others` names
    processes by PID whose CPU so far is added."""
    load = " ".join(f"{n:.2f}" for n in os.getloadavg())
    parts = [f"load {load} ({os.cpu_count()} CPUs)", f"bench CPU {own_cpu_seconds():.2f} s"]
    parts += [f"{name} CPU {cpu_seconds(pid):.2f} s" for name, pid in others.items()]
    return ", ".join(parts)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Client:
    """One kept-alive HTTP connection to the server. Says it came over HTTPS (the header
    production's proxy sets), so DEBUG=false does not answer a 301 to https; follows no
    redirect, and `request` exits on any status but the expected one."""

    def __init__(self, url: str, headers: dict | None = None):
        host, port = url.removeprefix("http://").split(":")
        self.conn = HTTPConnection(host, int(port), timeout=60)
        self.headers = {"X-Forwarded-Proto": "https", **(headers or {})}

    def request(self, method: str, path: str, body: bytes | None = None, expect: int = 200,
                headers: dict | None = None) -> bytes:  # fmt: skip
        self.conn.request(method, path, body=body, headers={**self.headers, **(headers or {})})
        response = self.conn.getresponse()
        content = response.read()
        if response.status != expect:
            sys.exit(f"{method} {path}: HTTP {response.status} (expected {expect}) "
                     f"{response.getheader('Location') or ''} {content[:300]!r}")  # fmt: skip
        return content

    def close(self) -> None:
        self.conn.close()


@dataclass
class Server:
    proc: subprocess.Popen
    url: str
    lines: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid


def serve(*args: str, env: dict | None = None, timeout: float = 120) -> Server:
    """`manage.py up 127.0.0.1:<free port> *args` with this environment (DATABASE_URL and
    REDIS_URL included: with REDIS_URL it serves only, the worker is the caller's)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "up", f"127.0.0.1:{port}", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    server = Server(proc=proc, url=f"http://127.0.0.1:{port}")
    # Drain the pipe continuously: a full pipe would block the server.
    threading.Thread(target=lambda: server.lines.extend(proc.stdout), daemon=True).start()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"manage.py up exited with {proc.returncode}:\n{''.join(server.lines)}")
        try:
            conn = HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz", headers={"X-Forwarded-Proto": "https"})
            if conn.getresponse().status == 200:
                conn.close()
                return server
        except OSError:
            time.sleep(0.3)
    stop(server)
    sys.exit(f"manage.py up did not answer /healthz within {timeout:.0f} s")


def stop(server: Server) -> None:
    """SIGTERM by PID, then SIGKILL if it has not exited within 30 s."""
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
        try:
            server.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()
