"""Processes started by a bench or a test, by name and PID (bench/chaos.py, tests/test_fleet.py):
each in a process group of its own with its log in the run's directory, restarted with the same
command, and all ended by PID at the end. Plus the waits for a starting process, bounded by the
process itself: a loaded machine starts it slowly, a process that exits ends the wait at once."""

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class NotUp(RuntimeError):
    """A process did not start listening or answering in time, or exited while starting."""


class Supervisor:
    """Every process this run starts, by name; `stop_all` ends each of them (and its group)."""

    def __init__(self, tmp: Path, env: dict[str, str] | None = None):
        self.tmp = tmp
        self.env: dict[str, str] = env if env is not None else {}
        self.procs: dict[str, subprocess.Popen] = {}
        self.argv: dict[str, list[str]] = {}
        self.envs: dict[str, dict[str, str]] = {}  # a process's own additions to `env`

    def spawn(
        self, name: str, argv: list[str] | None = None, env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        """Starts `name` (again, with its last command and environment when none is given)."""
        argv = argv or self.argv[name]
        self.argv[name] = argv
        if env is not None:
            self.envs[name] = env
        log = open(self.tmp / f"{name}.log", "ab")  # noqa: SIM115  (the child holds it)
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env={**self.env, **self.envs.get(name, {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            process_group=0,
        )
        log.close()
        self.procs[name] = proc
        return proc

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs.get(name)
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.kill(name, signal.SIGTERM)
        self.procs.clear()

    def log(self, name: str) -> str:
        return read_text(self.tmp / f"{name}.log")


def end(proc: subprocess.Popen | None) -> None:
    """SIGTERM to one process started without a group of its own, SIGKILL if it lingers."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def read_text(path: Path) -> str:
    """A log file as it is so far ("" before the process wrote it)."""
    with contextlib.suppress(OSError):
        return path.read_text(errors="replace")
    return ""


def wait_port(port: int, timeout: float, proc: subprocess.Popen | None = None) -> None:
    """Until something listens on `port`. With `proc` (what is starting), the wait lasts as
    long as it is alive (a loaded machine starts it slowly) and ends at once if it exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc is not None and proc.poll() is not None:
                raise NotUp(f"the process for :{port} exited ({proc.returncode})") from None
            time.sleep(0.1)
    raise NotUp(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f} s")
