"""A real PgBouncer of a test's own, on a free port of 127.0.0.1, in front of a Postgres
(tests/test_pgbouncer.py: the test database; tests/test_fleet.py: a cluster of its own), in
transaction mode. As the postgres OS user when run as root: PgBouncer refuses to run as root."""

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.supervisor import end, free_port, read_text

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


class PgBouncer:
    def __init__(
        self, host: str, port: int, user: str = "postgres", *, pool_size: int = 3,
        max_clients: int = 50,
    ) -> None:  # fmt: skip
        self.server = (host, port)
        self.user = user
        self.pool_size, self.max_clients = pool_size, max_clients
        self.port = free_port()
        # Not pytest's tmp_path: its parent is private to root, and pgbouncer runs as postgres.
        self.tmp = Path(tempfile.mkdtemp(prefix="agentops-pgbouncer-"))
        self.process: subprocess.Popen | None = None

    def url(self, database: str) -> str:
        return f"postgres://{self.user}@127.0.0.1:{self.port}/{database}"

    def start(self, timeout: float = 30.0) -> None:
        if not Path(PGBOUNCER).exists():
            raise RuntimeError("pgbouncer is not installed (apt-get install pgbouncer)")
        self.tmp.chmod(0o777)
        (self.tmp / "users.txt").write_text(f'"{self.user}" ""\n')
        (self.tmp / "pgbouncer.ini").write_text(
            f"""[databases]
* = host={self.server[0]} port={self.server[1]}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self.tmp / "users.txt"}
pool_mode = transaction
stats_users = {self.user}
default_pool_size = {self.pool_size}
max_client_conn = {self.max_clients}
server_reset_query =
ignore_startup_parameters = extra_float_digits
logfile = {self.tmp / "pgbouncer.log"}
pidfile = {self.tmp / "pgbouncer.pid"}
"""
        )
        for name in ("users.txt", "pgbouncer.ini"):
            (self.tmp / name).chmod(0o644)
        as_user = ["-u", "postgres"] if os.geteuid() == 0 else []
        # -q: its log goes to `logfile` only, not to stderr too.
        self.process = subprocess.Popen(
            [PGBOUNCER, "-q", *as_user, str(self.tmp / "pgbouncer.ini")]
        )
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.process.poll() is not None:
                    raise RuntimeError(self.log()) from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"pgbouncer did not listen within {timeout:.0f} s")
                time.sleep(0.2)

    def log(self) -> str:
        return read_text(self.tmp / "pgbouncer.log")

    def stop(self) -> None:
        end(self.process)
        shutil.rmtree(self.tmp, ignore_errors=True)
