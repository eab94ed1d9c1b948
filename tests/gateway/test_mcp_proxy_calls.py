"""The MCP proxy's handling of one tools/call, in process: what reaches the upstream server
for each decision, and what is reported. (End to end: test_mcp_proxy.py.)"""

import pytest
from agentops_client import AgentopsError, ApprovalTimeout, Decision
from agentops_client.mcp_proxy import GatingProxy, _agentops_error, _parse, error_result
from mcp import types


class Upstream:
    """The MCP server's client side, recording what it was asked to run."""

    def __init__(self, fail: Exception | None = None, result=None):
        self.calls, self.fail = [], fail
        self.result = result or types.CallToolResult(content=[types.TextContent(text="done")])

    async def call_tool(self, name, args):
        self.calls.append((name, args))
        if self.fail:
            raise self.fail
        return self.result


class FakeSession:
    def __init__(self, answer):
        self.answer, self.asked, self.reports, self.withdrawn = answer, [], [], []

    def submit(self, tool, args, **kw):
        self.asked.append((tool, args, kw))
        return {"status": "pending", "call": "c1"}

    def wait_for(self, call_id, **kw):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def withdraw(self, call_id, reason=""):
        self.withdrawn.append((call_id, reason))

    def report(self, decision, **kw):
        self.reports.append(kw)


def decision(status, args=None, **kw):
    return Decision(
        call_id="c1",
        tool="delete_record",
        status=status,
        approved=status in ("allowed", "approved"),
        args=args or {},
        **kw,
    )


def proxy(session, upstream) -> GatingProxy:
    p = GatingProxy(agentops=None, upstream=upstream, decision_timeout=5)
    p.session = session
    p.tools = [
        types.Tool(name=n, input_schema={"type": "object"}) for n in ("lookup", "delete_record")
    ]
    return p


async def test_approved_runs_the_approved_args_and_reports_the_result():
    session = FakeSession(decision("approved", {"key": "a", "reason": "edited"}, edited=True))
    upstream = Upstream()
    result = await proxy(session, upstream).call("delete_record", {"key": "a"})
    assert upstream.calls == [("delete_record", {"key": "a", "reason": "edited"})]
    assert session.asked[0][:2] == ("delete_record", {"key": "a"})
    assert not result.is_error
    assert session.reports[0]["result"]["content"] == [{"type": "text", "text": "done"}]


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (decision("rejected", reason="no", decided_by="approver"), "rejected by approver: no"),
        (decision("expired", reason="nobody decided"), "expired: nobody decided"),
        (ApprovalTimeout(408, "late"), "no decision within 5 s"),
        (AgentopsError(422, "invalid arguments for lookup"), "(422): invalid arguments"),
        (AgentopsError(0, "agentops unreachable"), "agentops unreachable"),
    ],
)
async def test_anything_but_approval_never_reaches_the_server(answer, says):
    session, upstream = FakeSession(answer), Upstream()
    result = await proxy(session, upstream).call("delete_record", {"key": "a"})
    assert upstream.calls == [] and session.reports == []
    assert result.is_error and says in result.content[0].text


async def test_a_tool_the_server_does_not_list_is_refused_without_asking():
    session, upstream = FakeSession(decision("allowed")), Upstream()
    result = await proxy(session, upstream).call("drop_database", {})
    assert result.is_error and "unknown tool 'drop_database'" in result.content[0].text
    assert session.asked == [] and upstream.calls == []


async def test_an_upstream_failure_is_reported_as_the_calls_error():
    session = FakeSession(decision("allowed", {"key": "a"}))
    upstream = Upstream(fail=RuntimeError("disk full"))
    result = await proxy(session, upstream).call("lookup", {"key": "a"})
    assert result.is_error and "disk full" in result.content[0].text
    assert session.reports[0]["error"] == "the MCP server failed: disk full"
    tool_error = Upstream(result=error_result("no such record"))
    session = FakeSession(decision("allowed", {"key": "a"}))
    await proxy(session, tool_error).call("lookup", {"key": "a"})
    assert session.reports[0]["error"] == "no such record"


def test_the_command_line_needs_agentops_a_token_and_one_upstream(monkeypatch):
    monkeypatch.delenv("AGENTOPS_TOKEN", raising=False)
    monkeypatch.delenv("AGENTOPS_URL", raising=False)
    for argv in (
        ["--token", "t", "--", "srv"],  # no agentops
        ["--agentops", "http://a", "--", "srv"],  # no token
        ["--agentops", "http://a", "--token", "t"],  # no upstream
        ["--agentops", "http://a", "--token", "t", "--upstream-url", "http://u", "--", "srv"],
        ["--agentops", "http://a", "--token", "t", "--listen", "9000", "--", "srv"],
    ):
        with pytest.raises(SystemExit):
            _parse(argv)
    args, command = _parse(["--agentops", "http://a", "--token", "t", "--", "srv", "--flag"])
    assert command == ["srv", "--flag"] and args.token == "t"


def test_a_wrapped_agentops_error_is_found():
    inner = AgentopsError(401, "bad token")
    assert _agentops_error(ExceptionGroup("g", [ExceptionGroup("h", [inner])])) is inner
    assert _agentops_error(ValueError("x")) is None


async def test_a_call_cancelled_while_it_waits_is_never_forwarded():
    import threading

    import anyio

    release = threading.Event()

    class Waiting(FakeSession):
        def wait_for(self, call_id, **kw):
            release.wait(5)  # a person who decides only after the client gave up
            return decision("approved", {"key": "a"})

    upstream, session = Upstream(), Waiting(None)
    with anyio.move_on_after(0.2) as scope:
        await proxy(session, upstream).call("delete_record", {"key": "a"})
    release.set()
    assert scope.cancelled_caught
    # Withdrawn in agentops: nobody decides it for nothing, and it never runs.
    assert session.withdrawn == [("c1", "the MCP client cancelled the call")]
    await anyio.sleep(0.1)
    assert upstream.calls == []


async def test_a_call_undecided_past_the_decision_timeout_is_withdrawn():
    session, upstream = FakeSession(ApprovalTimeout(408, "no decision")), Upstream()
    result = await proxy(session, upstream).call("delete_record", {"key": "a"})
    assert result.is_error and upstream.calls == []
    assert session.withdrawn == [("c1", "no decision within the proxy's 5 s")]


# Tasks mode (the client declared the Tasks extension): the task is the agentops call.


class Agentops:
    """agentops' GET /api/external/calls/<id>, for one call, and its reported result."""

    def __init__(self, status="approved"):
        self.call = {
            "call": "c1",
            "tool": "delete_record",
            "status": status,
            "approved": status in ("allowed", "approved"),
            "args": {"key": "a"},
            "reason": "",
            "created_at": "2026-11-27T10:00:00+00:00",
            "call_id": "mcp-task:1",
            "decided_at": None,
            "reported": None,
        }

    def request(self, method, path):
        if not path.endswith("/c1"):
            raise AgentopsError(404, "no such call")
        return dict(self.call)


class ReportingSession(FakeSession):
    def __init__(self, agentops):
        super().__init__(None)
        self.agentops = agentops

    def report(self, decision, **kw):
        super().report(decision, **kw)
        self.agentops.call["reported"] = {"is_error": False, "result": kw["result"]}


class SlowUpstream(Upstream):
    async def call_tool(self, name, args):
        import anyio

        await anyio.sleep(0.2)
        return await super().call_tool(name, args)


def tasks_proxy(agentops, upstream):
    p = proxy(ReportingSession(agentops), upstream)
    p.agentops = agentops
    return p


async def test_two_polls_of_an_approved_task_run_it_once():
    import anyio

    agentops, upstream = Agentops(), SlowUpstream()
    p, states = tasks_proxy(agentops, upstream), []
    async with anyio.create_task_group() as polls:
        for _ in range(2):
            polls.start_soon(lambda: _append(states, p.task_state("c1")))
    assert upstream.calls == [("delete_record", {"key": "a"})]
    assert [s["status"] for s in states] == ["completed", "completed"]
    assert states[0]["result"] == states[1]["result"]
    assert states[0]["result"]["content"] == [{"type": "text", "text": "done"}]


async def _append(into, state):
    into.append(await state)


@pytest.mark.parametrize(
    ("status", "task", "says"),
    [
        ("pending", "working", None),
        ("expired", "completed", "agentops: expired"),
        ("rejected", "completed", "agentops: rejected"),
        ("withdrawn", "cancelled", None),
    ],
)
async def test_a_task_is_what_its_call_is_and_only_approval_runs_it(status, task, says):
    agentops, upstream = Agentops(status), Upstream()
    state = await tasks_proxy(agentops, upstream).task_state("c1")
    assert state["status"] == task and state["taskId"] == "c1"
    if says:
        assert state["result"]["isError"] and says in state["result"]["content"][0]["text"]
    assert upstream.calls == []


async def test_an_unknown_task_is_an_invalid_params_error():
    from mcp import MCPError

    with pytest.raises(MCPError, match="no such task"):
        await tasks_proxy(Agentops(), Upstream()).task_state("c2")


@pytest.mark.parametrize("call_id", [None, "tool-use:7"])
async def test_another_clients_approved_call_of_the_agent_is_no_task(call_id):
    """Same agent token, a call some other client submitted and was approved: polling its id
    as a task must not run it on this MCP server."""
    from mcp import MCPError

    agentops, upstream = Agentops(), Upstream()
    agentops.call["call_id"] = call_id
    with pytest.raises(MCPError, match="no such task"):
        await tasks_proxy(agentops, upstream).task_state("c1")
    with pytest.raises(MCPError, match="no such task"):
        await tasks_proxy(agentops, upstream).cancel_task("c1")
    assert upstream.calls == []


def test_only_a_request_declaring_the_extension_on_the_modern_protocol_gets_a_task():
    from types import SimpleNamespace

    from agentops_client.mcp_proxy import TASKS_EXTENSION, wants_tasks

    declared = {"io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}

    def asks(version, meta):
        params = types.CallToolRequestParams(name="t", _meta=meta)
        return wants_tasks(SimpleNamespace(protocol_version=version, meta=None), params)

    assert asks("2026-07-28", declared)
    assert not asks("2025-11-25", declared)  # a legacy wire cannot carry a task result
    assert not asks("2026-07-28", None)
    assert not asks("2026-07-28", {"io.modelcontextprotocol/clientCapabilities": {}})


async def test_a_proxy_stopped_with_open_tasks_leaves_its_session_open():
    session = FakeSession(None)
    session.id, session.closed = "s1", []
    session.close = lambda *a, **kw: session.closed.append(a)
    p = proxy(session, Upstream())
    p.open_tasks.add("c1")
    await p.stop()
    assert session.closed == []
