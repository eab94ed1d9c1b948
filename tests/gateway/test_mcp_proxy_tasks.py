"""The MCP proxy's Tasks mode end to end: an MCP client (the SDK's `Client`) that declares the
Tasks extension (io.modelcontextprotocol/tasks, protocol 2026-07-28) gets a task for a gated
call at once instead of a `tools/call` held until a person decides, and fetches its outcome
with `tasks/get`; `tasks/cancel` withdraws the call in agentops. The SDK carries the wire
types but no Tasks requester, so the client side here is a `ClientExtension` claiming the
"task" result, as the SDK's extension API intends. A client that does not declare it still
blocks (also test_mcp_proxy.py)."""

import json
import time
from typing import Any, Literal

import anyio
import pytest
from agentops_client.mcp_proxy import TASKS_EXTENSION
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp_types import (
    CallToolResult,
    CancelTaskRequest,
    CancelTaskRequestParams,
    GetTaskRequest,
    GetTaskRequestParams,
    Result,
)
from pydantic import ConfigDict

from .test_mcp_proxy import (
    calls_log,
    decide_when_pending,
    over_http,
    proxy_over_stdio,
    received,
    text,
)
from .test_mcp_proxy import token as token  # the module's agent (fixture)

__all__ = ["calls_log", "over_http"]  # fixtures, imported for this module's tests


class CreatedTask(Result):
    """A `tools/call` answered with a task (resultType "task")."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"]
    task_id: str
    status: str
    status_message: str | None = None
    poll_interval_ms: int | None = None


class TaskState(Result):
    """A `tasks/get` answer: the task, with its result once completed."""

    model_config = ConfigDict(extra="allow")
    result_type: str | None = None
    task_id: str
    status: str
    status_message: str | None = None
    poll_interval_ms: int | None = None
    result: dict[str, Any] | None = None


async def get_task(session, task_id: str) -> TaskState:
    request = GetTaskRequest(params=GetTaskRequestParams(task_id=task_id))
    return await session.send_request(request, TaskState)


async def until_done(session, task_id: str, timeout: float = 60) -> TaskState:
    with anyio.fail_after(timeout):
        while True:
            state = await get_task(session, task_id)
            if state.status in ("completed", "failed", "cancelled"):
                return state
            await anyio.sleep(0.1)  # faster than pollIntervalMs: a test


async def resolve(created: CreatedTask, ctx: ClaimContext) -> CallToolResult:
    state = await until_done(ctx.session, created.task_id)
    assert state.status == "completed", state
    return CallToolResult.model_validate(state.result)


class Tasks(ClientExtension):
    identifier = TASKS_EXTENSION

    def claims(self):
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=resolve)]


def approval_of(up, call_id: str) -> dict:
    out = up.manage(
        "import json; from gateway.models import ExternalCall\n"
        f"c = ExternalCall.objects.select_related('approval').get(pk={call_id!r})\n"
        "print(json.dumps({'status': c.approval.status, 'reason': c.approval.reason,"
        " 'withdrawn': c.withdrawn_at is not None, 'run': str(c.run_id),"
        " 'run_open': not c.run.is_terminal}))"
    )
    return json.loads(out.strip().splitlines()[-1])


async def test_a_gated_call_is_a_task_at_once_and_completes_with_the_approved_result(
    up, token, live_approver, calls_log
):
    async with Client(proxy_over_stdio(up, token, calls_log), extensions=[Tasks()]) as client:
        assert client.protocol_version == "2026-07-28"
        assert TASKS_EXTENSION in (client.server_capabilities.extensions or {})
        # An allowed call needs no task: its result comes at once.
        assert text(await client.call_tool("lookup", {"key": "t0"})) == "record t0: ok"

        started = time.monotonic()
        created = await client.session.call_tool(
            "delete_record", {"key": "t1", "reason": "all"}, allow_claimed=True
        )
        assert isinstance(created, CreatedTask), created
        assert time.monotonic() - started < 10  # nobody decided: not held for a person
        assert created.status == "working" and created.poll_interval_ms
        assert (await get_task(client.session, created.task_id)).status == "working"
        # The task is the agentops call: the approver sees it waiting.
        assert approval_of(up, created.task_id)["status"] == "pending"
        assert received(calls_log) == [{"tool": "lookup", "args": {"key": "t0"}}]

        person, _ = decide_when_pending(
            live_approver, "approve", arguments={"key": "t1", "reason": "ticket 7"}
        )
        await anyio.to_thread.run_sync(person.join)
        state = await until_done(client.session, created.task_id)
        assert state.status == "completed"
        assert state.result["isError"] is False
        assert state.result["content"] == [{"type": "text", "text": "deleted t1"}]
        # Asked again: the same result, read from agentops; the tool ran once.
        again = await get_task(client.session, created.task_id)
        assert again.result == state.result
        assert received(calls_log)[1:] == [
            {"tool": "delete_record", "args": {"key": "t1", "reason": "ticket 7"}}
        ]

        # Through the SDK's own call_tool, the claim's resolver polls to the final result.
        person, _ = decide_when_pending(live_approver, "approve")
        result = await client.call_tool("delete_record", {"key": "t2"})
        await anyio.to_thread.run_sync(person.join)
        assert not result.is_error and text(result) == "deleted t2"


async def test_a_rejected_task_completes_with_an_error_naming_the_reason(
    up, token, live_approver, calls_log
):
    async with Client(proxy_over_stdio(up, token, calls_log), extensions=[Tasks()]) as client:
        person, _ = decide_when_pending(live_approver, "reject", reason="r1 is live data")
        result = await client.call_tool("delete_record", {"key": "r1"})
        await anyio.to_thread.run_sync(person.join)
        assert result.is_error
        assert text(result) == "agentops: rejected by approver: r1 is live data"
    assert received(calls_log) == []


async def test_cancelling_a_task_withdraws_the_approval_and_nothing_runs(
    up, token, live_approver, calls_log
):
    async with Client(proxy_over_stdio(up, token, calls_log), extensions=[Tasks()]) as client:
        created = await client.session.call_tool("delete_record", {"key": "c1"}, allow_claimed=True)
        assert isinstance(created, CreatedTask)
        request = CancelTaskRequest(params=CancelTaskRequestParams(task_id=created.task_id))
        await client.session.send_request(request, Result)
        state = await get_task(client.session, created.task_id)
        assert state.status == "cancelled"
        assert state.status_message == "withdrawn by the agent"
        seen = approval_of(up, created.task_id)
        assert seen["withdrawn"] and seen["status"] == "cancelled"
        assert created.task_id not in [
            a for a in live_approver.pending(agent="mcp-bot")
        ]  # nothing left for a person to decide
        assert await _no_pending(live_approver)
        # An unknown task is an error, not a made-up state.
        with pytest.raises(Exception, match="no such task"):
            await get_task(client.session, "00000000-0000-0000-0000-000000000000")
    assert received(calls_log) == []


async def _no_pending(live_approver) -> bool:
    return await anyio.to_thread.run_sync(lambda: live_approver.pending(agent="mcp-bot") == [])


async def test_a_task_outlives_the_proxy_that_handed_it_out(up, token, live_approver, calls_log):
    params = proxy_over_stdio(up, token, calls_log)
    async with Client(params, extensions=[Tasks()]) as client:
        created = await client.session.call_tool("delete_record", {"key": "d1"}, allow_claimed=True)
        assert isinstance(created, CreatedTask)
    # That proxy has stopped; its session stays open for the task, which a person approves.
    assert approval_of(up, created.task_id)["run_open"]
    person, _ = decide_when_pending(live_approver, "approve")
    await anyio.to_thread.run_sync(person.join)
    async with Client(params, extensions=[Tasks()]) as client:
        state = await until_done(client.session, created.task_id)
    assert state.status == "completed" and state.result["content"][0]["text"] == "deleted d1"
    assert received(calls_log) == [{"tool": "delete_record", "args": {"key": "d1", "reason": ""}}]


async def test_a_client_without_the_extension_is_held_until_the_decision(
    up, token, live_approver, calls_log
):
    async with Client(proxy_over_stdio(up, token, calls_log)) as client:
        person, decided = decide_when_pending(live_approver, "approve")
        result = await client.call_tool("delete_record", {"key": "o1"})
        returned = time.monotonic()
        await anyio.to_thread.run_sync(person.join)
        assert decided and returned >= decided[0]
        assert isinstance(result, CallToolResult) and text(result) == "deleted o1"


async def test_tasks_over_streamable_http(up, live_approver, calls_log, over_http):
    url, _ = over_http
    async with Client(url, extensions=[Tasks()]) as client:
        created = await client.session.call_tool("delete_record", {"key": "h1"}, allow_claimed=True)
        assert isinstance(created, CreatedTask) and created.status == "working"
        person, _ = decide_when_pending(live_approver, "approve")
        await anyio.to_thread.run_sync(person.join)
        state = await until_done(client.session, created.task_id)
        assert state.result["content"] == [{"type": "text", "text": "deleted h1"}]
        person, _ = decide_when_pending(live_approver, "reject", reason="not h2")
        result = await client.call_tool("delete_record", {"key": "h2"})
        await anyio.to_thread.run_sync(person.join)
        assert result.is_error and "not h2" in text(result)
    assert received(calls_log) == [{"tool": "delete_record", "args": {"key": "h1", "reason": ""}}]
