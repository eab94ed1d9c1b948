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
