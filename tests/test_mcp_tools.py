"""Tools from MCP servers (agentkit/mcp.py): what risk a server's annotations give a tool, how
its listing is cached, and what a call does when the server cannot be reached. End to end
(run, gate, approve, the server runs the call once): tests/approvals/test_mcp_gate.py."""

import os
import signal
import threading
import time

import pytest
from mcp.shared.exceptions import MCPError

from agentkit import mcp
from agentkit.agents import Agent
from agentkit.tools import (
    REGISTRY,
    Blast,
    ToolArgsError,
    ToolContext,
    ToolError,
    ToolInfraError,
    get_tool,
)
from approvals.gates import config as gate_config
from approvals.gates import policy as declared_policy
from tests.support.mcp_servers import logged, stdio_server

DEFINITIONS = [
    {
        "name": "stock.level",
        "description": "How many in stock.",
        "inputSchema": {
            "type": "object",
            "properties": {"sku": {"type": "string"}},
            "required": ["sku"],
            "title": "levelArguments",
        },
        "annotations": {"readOnlyHint": True},
    },
    {"name": "wipe", "inputSchema": {"type": "object"}, "annotations": {"destructiveHint": True}},
    {"name": "list_tables", "inputSchema": {"type": "object"}},  # a Python tool's name
]


@pytest.fixture
def listed(monkeypatch):
    """The server's listing is DEFINITIONS; `listed.count` says how often it was asked."""

    class Listing:
        count = 0
        fail = False

    def fake_listing(server):
        Listing.count += 1
        if Listing.fail:
            raise mcp._tool_error(OSError("connection refused"), 5)
        return DEFINITIONS

    monkeypatch.setattr(mcp, "_listing", fake_listing)
    yield Listing
    mcp.SERVERS.pop("srv", None)
    mcp.forget()


def server(*, bare: bool = False, **kw) -> mcp.McpServer:
    """The test server's declaration; `bare`: its tools keep their own names (no prefix)."""
    kw.setdefault("url", "http://127.0.0.1:9/mcp")
    return mcp.McpServer(name="srv", prefix="" if bare else None, **kw)


def test_read_only_hint_alone_leaves_a_new_tool_gated():
    assert mcp.risk_of({"readOnlyHint": True}) == (False, Blast.MEDIUM)
    assert mcp.risk_of({"destructiveHint": True}) == (False, Blast.HIGH)
    assert mcp.risk_of(None) == (False, Blast.MEDIUM)


def test_hints_raise_the_owners_declared_risk_and_never_lower_it():
    assert mcp.declared_risk((True, Blast.NONE), {"readOnlyHint": True}) == (True, Blast.NONE)
    assert mcp.declared_risk((True, Blast.LOW), {"destructiveHint": True}) == (False, Blast.HIGH)
    assert mcp.declared_risk((False, Blast.CRITICAL), {"destructiveHint": True}) == (
        False,
        Blast.CRITICAL,
    )
    assert mcp.declared_risk((False, Blast.HIGH), {"destructiveHint": False}) == (False, Blast.HIGH)


def test_tools_are_named_with_the_servers_prefix_and_keep_its_schema(listed):
    tools = {t.name: t for t in mcp.tools_of(server())}
    # A server's tool never hides a Python tool of the same name.
    assert set(tools) == {"srv_stock_level", "srv_wipe", "srv_list_tables"}
    assert tools["srv_stock_level"].input_schema() == {
        "type": "object",
        "properties": {"sku": {"type": "string"}},
        "required": ["sku"],
    }
    assert tools["srv_stock_level"].metadata()["mcp"] == {
        "server": "srv",
        "tool": "stock.level",
        "annotations": {"readOnlyHint": True},
        "read_only_hint": True,
    }
    assert (tools["srv_wipe"].reversible, tools["srv_wipe"].blast) == (False, Blast.HIGH)


def test_a_tool_that_would_hide_a_python_tool_is_left_out(listed):
    names = [t.name for t in mcp.tools_of(server(bare=True))]
    assert "list_tables" not in names
    assert REGISTRY["list_tables"].__class__.__name__ == "Tool"


def test_the_agents_gate_rules_decide_whether_a_read_only_tool_runs_ungated(listed):
    tool = {t.name: t for t in mcp.tools_of(server())}["srv_stock_level"]
    args = {"sku": "A-1"}
    assert declared_policy.evaluate(tool=tool, args=args, rules={}).gated
    trusted = {"never_gate": ["srv_stock_level"]}
    assert not declared_policy.evaluate(tool=tool, args=args, rules=trusted).gated
    vouched = mcp.tools_of(server(risks={"stock.level": (True, Blast.NONE)}), max_age=0)
    assert not {t.name: t for t in vouched}["srv_stock_level"].has_side_effects


def test_arguments_are_checked_against_the_servers_schema(listed):
    tool = {t.name: t for t in mcp.tools_of(server())}["srv_stock_level"]
    assert tool.validate({"sku": "A-1"}) == {"sku": "A-1"}
    with pytest.raises(ToolArgsError, match="'sku' is a required property"):
        tool.validate({})
    with pytest.raises(ToolArgsError, match="must be an object"):
        tool.validate(["A-1"])


def test_a_listing_is_reused_until_it_is_older_than_relist_seconds(listed):
    declared = server(relist_seconds=60)
    mcp.tools_of(declared)
    mcp.tools_of(declared)
    assert listed.count == 1
    mcp.tools_of(declared, max_age=0)
    assert listed.count == 2


def test_a_server_that_cannot_be_listed_keeps_its_last_listing(listed):
    declared = server()
    first = mcp.tools_of(declared)
    listed.fail = True
    assert mcp.tools_of(declared, max_age=0) == first
    mcp.forget()
    with pytest.raises(mcp.McpUnavailable, match="connection refused"):
        mcp.tools_of(declared, max_age=0)


def test_a_run_of_an_agent_whose_server_is_down_records_why_it_lacks_those_tools(listed):
    listed.fail = True
    agent = Agent(
        slug="mcp-down",
        title="t",
        description="",
        model="m",
        system_prompt="",
        tools=("list_tables",),
        input_form=None,
        prompt=str,
        script=lambda d: [],
        mcp_servers=(server(),),
    )
    snapshot = agent.snapshot()
    assert [t["name"] for t in snapshot["tools"]] == ["list_tables"]
    assert "connection refused" in snapshot["mcp"][0]["error"]


def test_a_process_that_never_listed_the_server_finds_its_tools_by_name(listed):
    mcp.declare(server())
    assert get_tool("srv_wipe") is not None and listed.count == 1
    assert get_tool("srv_nothing_like_it") is None


def test_an_unreachable_server_is_an_infrastructure_error_the_engine_retries(tmp_path):
    down = mcp.McpServer(name="gone", command=(str(tmp_path / "no-such-server"),))
    tool = mcp._tool(down, {"name": "x", "inputSchema": {"type": "object"}})
    ctx = ToolContext(run_id="r", idempotency_key="k", deadline=time.monotonic() + 10)
    with pytest.raises(ToolInfraError, match="could not be reached"):
        tool.call({}, ctx)


def test_a_server_that_honours_keys_gets_the_calls_key():
    keyed = mcp._tool(
        mcp.McpServer(name="k", url="http://127.0.0.1:9/mcp", idempotency_meta="idem"),
        {"name": "x"},
    )
    assert keyed.accepts_idempotency_key
    assert not mcp._tool(server(), {"name": "x"}).accepts_idempotency_key


def test_a_server_is_declared_with_a_command_or_a_url():
    with pytest.raises(ValueError, match="command or a url"):
        mcp.McpServer(name="both", command=("x",), url="http://x")
    with pytest.raises(ValueError, match="letters"):
        mcp.McpServer(name="no spaces", url="http://x")


def test_gate_rules_naming_tools_of_a_server_that_is_down_are_not_called_unknown(listed):
    listed.fail = True
    snapshot = {
        "tools": [],
        "gates": {"never_gate": ["srv_stock_level"], "always_gate": ["elsewhere_x"]},
        "mcp": [{**server().as_dict(), "error": "connection refused"}],
    }
    assert gate_config.problems(snapshot) == [
        "always_gate names unknown tool 'elsewhere_x' (the agent's tools: none)"
    ]


def test_a_json_rpc_error_is_the_calls_own_even_when_the_transport_wraps_it():
    refused = ExceptionGroup("task group", [MCPError(-32602, "unknown tool: nope")])
    error = mcp._tool_error(refused, 5)
    assert type(error) is ToolError and str(error) == "MCP error -32602: unknown tool: nope"
    dropped = ExceptionGroup("task group", [ConnectionResetError("peer closed")])
    error = mcp._tool_error(dropped, 5)
    assert isinstance(error, ToolInfraError) and "ConnectionResetError: peer closed" in str(error)


def test_a_server_schema_that_cannot_be_checked_refuses_the_call_not_the_run():
    tool = mcp._tool(
        server(), {"name": "odd", "inputSchema": {"type": "object", "minProperties": "x"}}
    )
    with pytest.raises(ToolArgsError, match="input schema cannot be checked"):
        tool.validate({"a": 1})


# --- kept sessions (a real stdio server) ---------------------------------------------------
@pytest.fixture
def kept(tmp_path):
    """A real stdio server, declared, listed, its kept session closed afterwards."""
    log = tmp_path / "calls.jsonl"
    declared = stdio_server("kept", log, idle_seconds=1.0)
    mcp.declare(declared)
    tools = {t.remote_name: t for t in mcp.tools_of(declared)}
    yield tools, log
    mcp.SERVERS.pop("kept", None)
    mcp.forget()


def _ctx() -> ToolContext:
    return ToolContext(run_id="r", idempotency_key="k", deadline=time.monotonic() + 30)


def _pids(log) -> list[int]:
    return [c["pid"] for c in logged(log)]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_calls_share_the_processs_kept_session_and_a_dead_server_is_started_again(kept):
    tools, log = kept
    ctx = _ctx()
    assert tools["stock_level"].call({"sku": "A-1"}, ctx) == {"sku": "A-1", "units": 12}
    assert tools["stock_level"].call({"sku": "B-2"}, ctx) == {"sku": "B-2", "units": 0}
    first, second = _pids(log)
    assert first == second  # one server process for both: no start, no handshake per call
    os.kill(first, signal.SIGKILL)
    # The session is found dead (at once, or by the call that meets it: an infrastructure
    # error, retried per the tool's policy), and the next call starts the server again.
    answers = []
    for _ in range(2):
        try:
            answers.append(tools["stock_level"].call({"sku": "A-1"}, ctx))
            break
        except ToolInfraError:
            time.sleep(0.2)
    assert answers == [{"sku": "A-1", "units": 12}]
    assert _pids(log)[-1] != first


def _reap_now() -> None:
    """What the reaper does every few seconds, now (on the sessions' loop)."""
    done = threading.Event()

    def reap() -> None:
        mcp.connections.reap_idle()
        done.set()

    mcp.connections.loop.call_soon_threadsafe(reap)
    assert done.wait(5)


def test_an_idle_session_is_closed_and_its_server_stops(kept):
    tools, log = kept
    tools["label_shelf"].call({"shelf": "S1", "text": "x"}, _ctx())
    (pid,) = _pids(log)
    _reap_now()
    assert not _gone(pid)  # used just now
    time.sleep(1.2)  # idle_seconds 1
    _reap_now()
    deadline = time.monotonic() + 15
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(pid)  # closed, and the stdio server with it


def test_a_session_is_not_idle_while_a_call_is_under_way(kept):
    tools, _ = kept
    slow = tools["count_aisle"]
    answers = []
    calling = threading.Thread(
        target=lambda: answers.append(slow.call({"aisle": "D", "seconds": 2.0}, _ctx()))
    )
    calling.start()
    time.sleep(1.5)  # the call is under way, begun more than idle_seconds (1) ago
    _reap_now()
    calling.join(30)
    assert answers == [{"result": "counted D"}]


def test_a_servers_tool_list_change_is_listed_at_the_next_run(kept):
    tools, _ = kept
    assert "shelves_C" not in tools
    tools["open_aisle"].call({"aisle": "C"}, _ctx())
    # Told on the kept session: the next run start lists again, not after relist_seconds.
    server = mcp.SERVERS["kept"]
    deadline = time.monotonic() + 5
    while "shelves_C" not in {t.remote_name for t in mcp.tools_of(server)}:
        assert time.monotonic() < deadline, "the listing was not renewed"
        time.sleep(0.1)
