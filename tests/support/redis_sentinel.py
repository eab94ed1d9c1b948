"""A Redis Sentinel group of a test's own on free ports of 127.0.0.1: a primary, one replica
and three sentinels (`redis-server --sentinel`, which is what the redis-sentinel binary is),
with a fast failure detection so a failover takes seconds. The shared Redis is never touched;
every process is ended by its PID."""

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from tests.support.postgres_cluster import free_port

MASTER = "agentops-test"
DOWN_AFTER_MS = 1000


def redis_server() -> str:
    found = shutil.which("redis-server")
    if not found:
        raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
    return found


class SentinelGroup:
    def __init__(
        self, *, password: str | None = None, sentinel_password: str | None = None
    ) -> None:
        self.password = password  # the primary's and the replica's
        self.sentinel_password = sentinel_password
        self.tmp = Path(tempfile.mkdtemp(prefix="agentops-test-sentinel-"))
        self.primary_port, self.replica_port = free_port(), free_port()
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.procs: dict[int, subprocess.Popen] = {}  # by port

    def url(self, db: int = 0) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        query = f"?sentinel_password={self.sentinel_password}" if self.sentinel_password else ""
        auth = f":{self.password}@" if self.password else ""
        return f"sentinel://{auth}{hosts}/{MASTER}/{db}{query}"

    def _spawn(self, port: int, argv: list[str]) -> None:
        log = open(self.tmp / f"{port}.log", "ab")  # noqa: SIM115 - the process writes it
        self.procs[port] = subprocess.Popen(
            [redis_server(), *argv], cwd=self.tmp, stdout=log, stderr=subprocess.STDOUT
        )

    def _server(self, port: int, *extra: str) -> None:
        if self.password:
            extra = ("--requirepass", self.password, "--masterauth", self.password, *extra)
        data = self.tmp / str(port)
        data.mkdir(exist_ok=True)
        self._spawn(
            port,
            ["--port", str(port), "--bind", "127.0.0.1", "--dir", str(data), "--save", "",
             "--appendonly", "no", *extra],
        )  # fmt: skip

    def start(self, timeout: float = 30.0) -> None:
        self._server(self.primary_port)
        self._server(self.replica_port, "--replicaof", "127.0.0.1", str(self.primary_port))
        for port in self.sentinel_ports:
            conf = self.tmp / f"sentinel-{port}.conf"  # a sentinel rewrites its own config
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.tmp}\n"
                f"sentinel monitor {MASTER} 127.0.0.1 {self.primary_port} 2\n"
                f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {MASTER} 10000\n"
            )
            if self.password:
                with conf.open("a") as f:
                    f.write(f"sentinel auth-pass {MASTER} {self.password}\n")
            if self.sentinel_password:  # asked of clients and of the other sentinels
                with conf.open("a") as f:
                    f.write(f"requirepass {self.sentinel_password}\n")
                    f.write(f"sentinel sentinel-pass {self.sentinel_password}\n")
            self._spawn(port, [str(conf), "--sentinel"])
        deadline = time.monotonic() + timeout
        while not self._ready():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the sentinel group did not come up; logs in {self.tmp}")
            time.sleep(0.2)

    def _ready(self) -> bool:
        """The replica is in sync and every sentinel knows the replica and the two others:
        before that a failover could not elect a leader or find a replica to promote."""
        try:
            replica = redis.Redis(port=self.replica_port, socket_timeout=1, password=self.password)
            if replica.info("replication").get("master_link_status") != "up":
                return False
            for port in self.sentinel_ports:
                sentinel = redis.Redis(
                    port=port,
                    socket_timeout=1,
                    decode_responses=True,
                    password=self.sentinel_password,
                )
                if len(sentinel.execute_command("SENTINEL", "REPLICAS", MASTER)) < 1:
                    return False
                if len(sentinel.execute_command("SENTINEL", "SENTINELS", MASTER)) < 2:
                    return False
        except redis.RedisError:
            return False
        return True

    def primary_address(self) -> tuple[str, int]:
        sentinel = redis.Redis(
            port=self.sentinel_ports[0], socket_timeout=1, password=self.sentinel_password
        )
        host, port = sentinel.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)
        return host.decode(), int(port)

    def kill_primary(self) -> None:
        """SIGKILL: no shutdown, no last save; the sentinels see it stop answering."""
        proc = self.procs[self.primary_port]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)
        shutil.rmtree(self.tmp, ignore_errors=True)
