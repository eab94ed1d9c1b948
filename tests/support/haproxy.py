"""compose's load balancer (deploy/haproxy/haproxy.cfg) run by a real HAProxy on private ports
(tests/test_compose.py, tests/test_fleet.py): the configuration as it is, with its listeners on
127.0.0.1 and the replicas Docker's DNS would name replaced by local ones."""

import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.supervisor import ROOT, end, free_port, read_text

HAPROXY_CFG = ROOT / "deploy" / "haproxy" / "haproxy.cfg"
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"


def local_config(port: int, monitor: int, backends: list[int], stats: Path | None = None) -> str:
    text = HAPROXY_CFG.read_text()
    if stats is not None:  # a socket to ask which replicas are up (`show stat`)
        text = text.replace("global\n", f"global\n    stats socket {stats} level user\n", 1)
    text = text.replace("bind :8000", f"bind 127.0.0.1:{port}")
    text = text.replace("bind :8404", f"bind 127.0.0.1:{monitor}")
    servers = "\n    ".join(
        f"server web{n} 127.0.0.1:{backend} check" for n, backend in enumerate(backends, 1)
    )
    text = re.sub(r"server-template web .*", servers, text)
    assert all(f"127.0.0.1:{backend} check" in text for backend in backends)
    return text


class HAProxy:
    def __init__(self, backends: list[int]) -> None:
        self.port, self.monitor = free_port(), free_port()
        self.tmp = Path(tempfile.mkdtemp(prefix="agentops-haproxy-"))
        self.stats = self.tmp / "stats.sock"
        config = local_config(self.port, self.monitor, backends, self.stats)
        (self.tmp / "haproxy.cfg").write_text(config)
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> None:
        """Until its health checks found a backend up (the monitor answers 200)."""
        if not Path(HAPROXY).exists():
            raise RuntimeError("haproxy is not installed (apt-get install haproxy)")
        log = open(self.tmp / "haproxy.log", "ab")  # noqa: SIM115  (the child holds it)
        self.process = subprocess.Popen(
            [HAPROXY, "-db", "-f", str(self.tmp / "haproxy.cfg")],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while not self.healthy():
            if self.process.poll() is not None:
                raise RuntimeError(f"haproxy refused its configuration: {self.log()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError("haproxy never found a backend up")
            time.sleep(0.2)

    def healthy(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.monitor), timeout=2) as s:
                s.sendall(b"GET /health HTTP/1.0\r\n\r\n")
                return b" 200 " in s.recv(1024)
        except OSError:
            return False

    def servers_up(self) -> dict[str, bool]:
        """Each replica of the `web` backend: up (its health checks pass) or not."""
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(2)
                s.connect(str(self.stats))
                s.sendall(b"show stat\n")
                out = b""
                while chunk := s.recv(65536):
                    out += chunk
        except OSError:
            return {}
        rows = [line.split(",") for line in out.decode().splitlines() if line.startswith("web,")]
        return {row[1]: row[17].startswith("UP") for row in rows if row[1] != "BACKEND"}

    def wait_all_up(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ((up := self.servers_up()) and all(up.values())):
            if time.monotonic() > deadline:
                raise RuntimeError(f"replicas not up after {timeout:.0f} s: {up}")
            time.sleep(0.5)

    def log(self) -> str:
        return read_text(self.tmp / "haproxy.log")

    def stop(self) -> None:
        end(self.process)
        shutil.rmtree(self.tmp, ignore_errors=True)
