"""A Postgres cluster of a test's own on a free port of 127.0.0.1 (initdb + pg_ctl, as the
`postgres` OS user when run as root, as bench/chaos.py does), to restart and stop at will:
the shared server is never touched."""

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def bindir() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, bin_dir: Path):
        self.bin = bin_dir
        # Not under pytest's tmp_path: its parents are private to root, and Postgres refuses
        # to run as root, so the cluster belongs to the postgres user.
        self.tmp = Path(tempfile.mkdtemp(prefix="agentops-test-pg-"))
        self.data, self.sockets = self.tmp / "data", self.tmp / "sock"
        self.as_root = os.geteuid() == 0
        self.port = free_port()
        self.started = False

    def _pg(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [str(self.bin / argv[0]), *argv[1:]]
        if self.as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(
            cmd, cwd=self.tmp, capture_output=True, text=True, check=check, timeout=180
        )

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def init(self) -> None:
        self.data.mkdir(mode=0o700)
        self.sockets.mkdir(mode=0o700)
        if self.as_root:
            for d in (self.tmp, self.data, self.sockets):
                shutil.chown(d, "postgres", "postgres")
        self._pg("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self.start()

    def start(self) -> None:
        opts = (
            f"-p {self.port} -k {self.sockets} -c listen_addresses=127.0.0.1 -c fsync=off"
            " -c max_connections=100"
        )
        log = str(self.tmp / "pg.log")
        self._pg("pg_ctl", "-D", str(self.data), "-l", log, "-o", opts, "-w", "-t", "120", "start")
        self.started = True

    def stop(self, mode: str = "fast") -> None:
        self._pg("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "120", "stop")

    def restart(self, mode: str) -> None:
        log = str(self.tmp / "pg.log")
        self._pg(
            "pg_ctl", "-D", str(self.data), "-l", log, "-m", mode, "-w", "-t", "120", "restart"
        )  # fmt: skip

    def down_for(self, seconds: float, mode: str = "fast") -> None:
        self.stop(mode)
        time.sleep(seconds)
        self.start()

    def destroy(self) -> None:
        if self.started:
            stopped = self._pg(
                "pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False
            )
            pidfile = self.data / "postmaster.pid"
            if stopped.returncode != 0 and pidfile.exists():
                with contextlib.suppress(OSError, ValueError):
                    os.kill(int(pidfile.read_text().split()[0]), signal.SIGKILL)
        shutil.rmtree(self.tmp, ignore_errors=True)
