"""The MCP gating proxy end to end: an MCP client (the SDK's) calls a small local MCP server
through `agentops-mcp-proxy`, against a live agentops. An allowed call passes at once; a gated
one is held until a person approves and then reaches the server with exactly the approved
(edited) arguments; a rejected one never reaches the server."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.livesupport import free_port

from .live_agentops import GATES, external_agent

ROOT = Path(__file__).resolve().parents[2]
SERVER = str(ROOT / "examples" / "mcp_records_server.py")


@pytest.fixture(scope="module")
def token(up) -> str:
    # The admin's word that the records server's lookup only reads (its own hint lowers
    # nothing).
    return external_agent(up, slug="mcp-bot", gates={**GATES, "never_gate": ["lookup"]})


@pytest.fixture
def calls_log(tmp_path) -> Path:
    return tmp_path / "calls.jsonl"


def received(log: Path) -> list[dict]:
    """What the upstream MCP server was called with."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def proxy_over_stdio(up, token, log: Path, *upstream: str) -> StdioServerParameters:
    env = {**os.environ, "AGENTOPS_TOKEN": token, "RECORDS_CALL_LOG": str(log)}
    if not upstream:
        upstream = ("--", sys.executable, SERVER)
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "agentops_client.mcp_proxy", "--agentops", up.url, *upstream],
        env=env,
    )


def decide_when_pending(live_approver, decision="approve", **kw) -> tuple[threading.Thread, list]:
    """A person deciding in the background once a call waits; records when they decided."""
    decided: list[float] = []

    def person():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            waiting = live_approver.pending(agent="mcp-bot")
            if waiting:
                time.sleep(0.5)  # the proxy's client is kept waiting meanwhile
                decided.append(time.monotonic())
                live_approver.decide(waiting[0], decision, **kw)
                return
            time.sleep(0.1)

    thread = threading.Thread(target=person)
    thread.start()
    return thread, decided


async def _call(client: Client, live_approver, tool: str, args: dict, decision=None, **kw):
    """Call through the proxy (a person deciding when `decision`); (result, decided_at)."""
    person, decided = (None, [])
    if decision:
        person, decided = decide_when_pending(live_approver, decision, **kw)
    result = await client.call_tool(tool, args)
    returned = time.monotonic()
    if person:
        await anyio.to_thread.run_sync(person.join)
    return result, returned, decided


def text(result) -> str:
    return "\n".join(c.text for c in result.content)


async def test_allowed_passes_gated_waits_for_the_edit_rejected_never_arrives(
    up, token, live_approver, calls_log
):
    async with Client(proxy_over_stdio(up, token, calls_log)) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert set(listed) == {"lookup", "delete_record"}
        assert listed["delete_record"].annotations.destructive_hint is True

        # Read-only by the admin's rule (never_gate): allowed, no person involved.
        result, _, _ = await _call(client, live_approver, "lookup", {"key": "a1"})
        assert not result.is_error and text(result) == "record a1: ok"
        assert received(calls_log) == [{"tool": "lookup", "args": {"key": "a1"}}]

        # Destructive: held until the live_approver decides, then run with their edit only.
        result, returned, decided = await _call(
            client,
            live_approver,
            "delete_record",
            {"key": "a1", "reason": "all of them"},
            "approve",
            arguments={"key": "a1", "reason": "stale, ticket 42"},
        )
        assert decided and returned >= decided[0]
        assert not result.is_error and text(result) == "deleted a1"
        assert received(calls_log)[1:] == [
            {"tool": "delete_record", "args": {"key": "a1", "reason": "stale, ticket 42"}}
        ]

        # Rejected: an MCP tool error with the reason; the server never hears of it.
        result, _, _ = await _call(
            client,
            live_approver,
            "delete_record",
            {"key": "b2"},
            "reject",
            reason="b2 is live data",
        )
        assert result.is_error
        assert text(result) == "agentops: rejected by approver: b2 is live data"
        assert len(received(calls_log)) == 2

        # Arguments the registered schema refuses never reach the server either.
        result, _, _ = await _call(client, live_approver, "lookup", {"key": 7})
        assert result.is_error and "422" in text(result)
        assert len(received(calls_log)) == 2

    # The session shows on agentops' side: registered tools, the calls, their results.
    report = up.manage(
        "import json; from runs.models import Run; from gateway.models import ExternalTool\n"
        "run = Run.objects.filter(agent='mcp-bot').latest('created_at')\n"
        "tools = {t.name: [t.reversible, t.blast] for t in ExternalTool.objects.filter("
        "agent__slug='mcp-bot', name__in=['lookup', 'delete_record'])}\n"
        "steps = [s.data for s in run.steps.order_by('seq') if s.kind == 'tool']\n"
        "print(json.dumps({'status': run.status, 'trigger': run.trigger, 'tools': tools,"
        " 'results': [[s['tool'], s['args'], s.get('is_error')] for s in steps]}))"
    )
    seen = json.loads(report.strip().splitlines()[-1])
    assert seen["trigger"] == "external" and seen["status"] == "succeeded"
    # lookup's read-only hint lowered nothing (never_gate, the admin's rule, let it through).
    assert seen["tools"] == {"lookup": [False, "medium"], "delete_record": [False, "high"]}
    assert seen["results"] == [
        ["lookup", {"key": "a1"}, False],
        ["delete_record", {"key": "a1", "reason": "stale, ticket 42"}, False],
    ]


def wait_for_port(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"nothing listens on {port}")


@pytest.fixture
def over_http(up, token, calls_log):
    """The records server over streamable HTTP, and the proxy in front of it serving
    streamable HTTP too: the proxy's URL."""
    env = {**os.environ, "AGENTOPS_TOKEN": token, "RECORDS_CALL_LOG": str(calls_log)}
    upstream_port, proxy_port = free_port(), free_port()
    procs = []
    try:
        procs.append(
            subprocess.Popen(
                [sys.executable, SERVER, "--http", str(upstream_port)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        )
        wait_for_port(upstream_port, procs[0])
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "agentops_client.mcp_proxy",
                    "--agentops",
                    up.url,
                    "--session",
                    "over http",
                    "--listen",
                    f"127.0.0.1:{proxy_port}",
                    "--upstream-url",
                    f"http://127.0.0.1:{upstream_port}/mcp",
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        )
        wait_for_port(proxy_port, procs[1])
        yield f"http://127.0.0.1:{proxy_port}/mcp", procs[1]
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


async def test_streamable_http_on_both_sides(up, live_approver, calls_log, over_http):
    url, proxy = over_http
    async with Client(url) as client:
        result, _, _ = await _call(client, live_approver, "lookup", {"key": "h1"})
        assert text(result) == "record h1: ok"
        result, returned, decided = await _call(
            client, live_approver, "delete_record", {"key": "h1"}, "approve"
        )
        assert decided and returned >= decided[0] and text(result) == "deleted h1"
        result, _, _ = await _call(
            client, live_approver, "delete_record", {"key": "h2"}, "reject", reason="not today"
        )
        assert result.is_error and "not today" in text(result)
    assert received(calls_log) == [
        {"tool": "lookup", "args": {"key": "h1"}},
        {"tool": "delete_record", "args": {"key": "h1", "reason": ""}},
    ]
    # Stopping the proxy ends its agentops session.
    proxy.send_signal(signal.SIGTERM)
    assert proxy.wait(timeout=15) == 0
    # The latest: the server is shared with test_mcp_proxy_tasks.py, whose proxy has a
    # session of the same name.
    status = up.manage(
        "from runs.models import Run; print(Run.objects.filter("
        "agent='mcp-bot', input__session='over http').latest('created_at').status)"
    )
    assert status.strip().splitlines()[-1] == "succeeded"


def test_the_example_runs_against_a_local_agentops(up, token, live_approver, calls_log):
    person, _ = decide_when_pending(live_approver, arguments={"key": "r-17", "reason": "reviewed"})
    env = {
        **os.environ,
        "AGENTOPS_URL": up.url,
        "AGENTOPS_TOKEN": token,
        "RECORDS_CALL_LOG": str(calls_log),
    }
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "mcp_proxy_client.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    person.join()
    assert done.returncode == 0, done.stderr
    assert "tools: lookup, delete_record" in done.stdout
    assert "lookup: record r-17: ok" in done.stdout
    assert "delete_record: deleted r-17" in done.stdout
    assert received(calls_log)[-1] == {
        "tool": "delete_record",
        "args": {"key": "r-17", "reason": "reviewed"},
    }
