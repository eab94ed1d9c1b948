"""compose.yaml scales out (`docker compose up --scale web=2 --scale worker=4`): only the load
balancer publishes a host port, migrations run once in their own job that every process using
the database waits for, and the load balancer's configuration, run in a real HAProxy, passes
WebSocket upgrades and appends the client's address to X-Forwarded-For (web:
AXES_PROXY_COUNT=1). Docker itself is not needed: the file is read as compose reads it (YAML
merge keys, `${VAR:-default}` taken at its default)."""

import re
import shlex
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.haproxy import HAPROXY_CFG, HAProxy

REPO = Path(__file__).resolve().parent.parent
DEFAULT = re.compile(r"\$\{(\w+)(?::?[-?]([^}]*))?\}")


def interpolate(value: Any) -> Any:
    """Each `${VAR:-default}` at its default (the environment of a plain `docker compose up`)."""
    if isinstance(value, str):
        return DEFAULT.sub(lambda m: m.group(2) or "", value)
    if isinstance(value, list):
        return [interpolate(v) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v) for k, v in value.items()}
    return value


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    return interpolate(yaml.safe_load((REPO / "compose.yaml").read_text())["services"])


def command_of(service: dict[str, Any]) -> str:
    command = service.get("command", "")
    return command if isinstance(command, str) else shlex.join(command)


def uses_database(service: dict[str, Any]) -> bool:
    return "DATABASE_URL" in service.get("environment", {})


def test_only_the_load_balancer_publishes_a_host_port(services):
    assert "ports" not in services["web"], "web replicas cannot share a host port"
    published = {name: s["ports"] for name, s in services.items() if s.get("ports")}
    assert list(published) == ["lb"]
    assert published["lb"] == ["8000:8000"]
    assert (
        "./deploy/haproxy/haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro"
        in (services["lb"]["volumes"])
    )
    assert services["lb"]["healthcheck"]["test"]
    assert services["web"]["healthcheck"]["test"]


def test_every_process_using_the_database_waits_for_migrate(services):
    users = [name for name, s in services.items() if uses_database(s) and name != "migrate"]
    assert {"web", "worker", "people-worker", "beat"} <= set(users)
    for name in users:
        assert services[name]["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"
        }, name
    migrate = services["migrate"]
    assert migrate["restart"] == "no"
    assert "migrate" not in migrate["depends_on"]
    # Straight to Postgres, never through PgBouncer's transaction pooling.
    assert migrate["environment"]["DATABASE_URL"].endswith("@postgres:5432/agentops")


def test_only_migrate_migrates(services):
    assert re.search(r"\bmanage\.py migrate\b", command_of(services["migrate"]))
    for name, service in services.items():
        if name != "migrate":
            assert "migrate" not in command_of(service), name
    dockerfile = (REPO / "Dockerfile").read_text().splitlines()
    assert "migrate" not in next(line for line in dockerfile if line.startswith("CMD"))


def test_web_counts_one_proxy_and_beat_runs_two(services):
    assert services["web"]["environment"]["AXES_PROXY_COUNT"] == "1"
    # Beat's leader lock in Redis (celery-redbeat) lets two run: one schedules.
    assert services["beat"]["deploy"]["replicas"] == 2
    assert "--schedule" not in command_of(services["beat"])
    assert "-Q people,sweeps" in command_of(services["people-worker"])


def test_pgbouncer_and_sentinel_are_optional_profiles(services):
    assert services["pgbouncer"]["profiles"] == ["pgbouncer"]
    assert services["sentinel"]["profiles"] == ["sentinel"]
    assert services["redis-replica"]["profiles"] == ["sentinel"]
    # Off by default: Postgres directly; with the profile, the variables point at PgBouncer.
    assert services["web"]["environment"]["DATABASE_URL"].endswith("@postgres:5432/agentops")
    assert services["web"]["environment"]["DATABASE_PGBOUNCER"] == "false"
    for name in ("web", "worker", "people-worker", "beat"):
        assert services[name]["depends_on"]["pgbouncer"]["required"] is False, name
    ini = (REPO / "deploy" / "pgbouncer" / "pgbouncer.ini").read_text()
    assert re.search(r"^pool_mode = transaction$", ini, re.M)
    assert re.search(r"^agentops = host=postgres port=5432", ini, re.M)


def test_proxy_configuration_forwards_headers_and_websockets():
    text = HAPROXY_CFG.read_text()
    assert re.search(r"^\s+mode http$", text, re.M)
    assert re.search(r"^\s+option forwardfor$", text, re.M)
    assert re.search(r"^\s+timeout tunnel \S+", text, re.M)
    # Never strip what an upgrade needs, never trust the client's scheme.
    assert not re.search(r"del-header\s+(Upgrade|Connection|X-Forwarded-For)", text, re.I)
    assert "http-request set-header X-Forwarded-Proto http if !{ ssl_fc }" in text
    template = r"server-template web \S+ web:8000 check resolvers docker init-addr none"
    assert re.search(template, text)


class Backend:
    """A web replica stand-in: records the request head it receives, answers a WebSocket
    upgrade with 101 and then echoes what arrives, and any other request with 200."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.heads: list[str] = []
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def handle(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                data += chunk
            head = data.split(b"\r\n\r\n", 1)[0].decode()
            if not head.startswith("GET /healthz"):
                self.heads.append(head)
            if "upgrade: websocket" in head.lower():
                conn.sendall(
                    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                    b"Connection: Upgrade\r\nSec-WebSocket-Accept: x\r\n\r\n"
                )
                while chunk := conn.recv(4096):
                    conn.sendall(chunk)
            else:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")


def headers_of(head: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in head.split("\r\n")[1:]:
        name, _, value = line.partition(":")
        found.setdefault(name.strip().lower(), []).append(value.strip())
    return found


@pytest.fixture
def haproxy():
    """compose's haproxy.cfg as it is, with its listeners on private ports and the
    replicas Docker's DNS would name replaced by one local backend."""
    backend = Backend()
    proxy = HAProxy([backend.port])
    try:
        proxy.start()
    except RuntimeError as exc:
        pytest.fail(f"{exc} (.ci/run installs haproxy)")
    try:
        yield proxy.port, backend
    finally:
        proxy.stop()
        backend.sock.close()


def test_haproxy_passes_a_websocket_upgrade_and_appends_the_client_address(haproxy):
    port, backend = haproxy
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(
            b"GET /ws/runs/1/?after=3 HTTP/1.1\r\nHost: localhost\r\n"
            b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
            b"X-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Proto: https\r\n\r\n"
        )
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += s.recv(4096)
        assert answer.startswith(b"HTTP/1.1 101"), answer
        # A tunnel now: bytes pass both ways.
        s.sendall(b"\x81\x05hello")
        echoed = b""
        while len(echoed) < 7:
            echoed += s.recv(4096)
        assert echoed == b"\x81\x05hello"

    head = headers_of(backend.heads[-1])
    assert head["upgrade"] == ["websocket"]
    assert head["connection"] == ["Upgrade"]
    # The client's own entry stays left; HAProxy appends what it saw, read by
    # AXES_PROXY_COUNT=1 as the last entry.
    forwarded = ",".join(head["x-forwarded-for"]).replace(" ", "").split(",")
    assert forwarded == ["6.6.6.6", "127.0.0.1"]
    # The scheme the client claimed is overwritten with the one HAProxy served.
    assert head["x-forwarded-proto"] == ["http"]


def test_haproxy_forwards_a_plain_request(haproxy):
    port, backend = haproxy
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /runs/ HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := s.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200"), answer
    head = headers_of(backend.heads[-1])
    assert head["x-forwarded-for"] == ["127.0.0.1"]
    assert head["x-forwarded-proto"] == ["http"]
