"""An MCP gating proxy: every `tools/call` goes through agentops before it reaches the server.

    agentops-mcp-proxy --agentops http://127.0.0.1:8000 -- python my_server.py
    agentops-mcp-proxy --agentops http://127.0.0.1:8000 --upstream-url http://host:9000/mcp
    (the agent's token in AGENTOPS_TOKEN, or --token)

The proxy is an MCP server to its client (stdio, or streamable HTTP with `--listen
HOST:PORT`) and an MCP client to the upstream server (a command over stdio, or
`--upstream-url` over streamable HTTP); it needs the official SDK (`pip install
'./clients/python[mcp]'`). On start it lists the upstream's tools, registers them with
agentops as the agent's tools (schemas, and risk from the tools' annotations; see
gateway/mcp_tools.py), and opens one agentops session for its lifetime. Each call is then
submitted to that session: allowed by the gate policy -> forwarded at once; gated -> held
until a person decides; approved -> forwarded with exactly the approved (maybe edited)
arguments; rejected, expired or not decided in time -> an MCP tool error naming the reason,
and the upstream never sees the call. What the upstream answered is reported back to the
session (its timeline shows the result).

A client that declares the MCP Tasks extension (`io.modelcontextprotocol/tasks`, protocol
2026-07-28) on its `tools/call` is not kept waiting for a person: a gated call answers at once
with a task (status "working") whose id is the agentops call's id, and the client polls
`tasks/get`. Once the call is decided the task completes: approved -> the proxy runs the tool
(on the next poll) and the task carries its result; rejected or expired -> a tool error naming
the reason. `tasks/cancel` withdraws the call in agentops (approvers see it withdrawn by the
agent; it never runs). The task's state is the call's record in agentops, read afresh on each
poll, so a restarted proxy answers for tasks an earlier one handed out (a proxy stopped with
tasks open leaves its session open for that). Older clients keep the blocking mode.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
import uuid
from collections.abc import Sequence
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from typing import Any

from .claude import CANCEL_POLL_SECONDS, deny_message
from .client import AgentopsClient, AgentopsError, ApprovalTimeout, Decision, Session

try:
    import anyio
    import mcp.types as types
    from mcp import Client, MCPError, StdioServerParameters
    from mcp.server import Server
    from mcp.server.stdio import stdio_server
    from mcp_types import CLIENT_CAPABILITIES_META_KEY, INTERNAL_ERROR, INVALID_PARAMS
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "the MCP proxy needs the MCP SDK: pip install 'agentops-client[mcp]'"
    ) from exc

log = logging.getLogger("agentops.mcp_proxy")

# Environment the upstream command must not inherit: the agent's credential is the proxy's.
PRIVATE_ENV = ("AGENTOPS_TOKEN",)

# The MCP Tasks extension (SEP-2663): a client lists it in a request's capabilities to accept
# a task in place of a tool's result. The SDK carries the wire types, not the extension.
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
# How often a client should ask about a task waiting for a person.
TASK_POLL_MS = 2000
# The call id (agentops' idempotency id) a task's call is submitted with: only such calls are
# tasks, so tasks/get never runs another client's approved call of the same agent.
TASK_CALL_PREFIX = "mcp-task:"


def tool_definition(tool: types.Tool) -> dict:
    """An MCP Tool as JSON (the wire names: inputSchema, annotations.readOnlyHint...)."""
    return tool.model_dump(mode="json", by_alias=True, exclude_none=True)


def error_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def _result_json(result: types.CallToolResult) -> dict:
    body = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    body.pop("_meta", None)
    return body


def _reported_result(reported: dict) -> dict:
    """The CallToolResult (as JSON) of what the proxy reported for a call."""
    if reported.get("is_error"):
        text = reported.get("error") or "the tool reported an error"
        return {"content": [{"type": "text", "text": text}], "isError": True}
    result = reported.get("result")
    if isinstance(result, dict) and "content" in result:
        return result
    return {"content": [{"type": "text", "text": json.dumps(result)}], "isError": False}


def wants_tasks(ctx: Any, params: types.CallToolRequestParams) -> bool:
    """Whether this request's client accepts a task for an answer: it declares the Tasks
    extension in the request's own capabilities (2026-07-28; the spec forbids a task to any
    request that does not)."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = (params.meta or ctx.meta or {}).get(CLIENT_CAPABILITIES_META_KEY) or {}
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    return isinstance(extensions, dict) and TASKS_EXTENSION in extensions


def _task(task_id: str, status: str, created: str, updated: str = "", **extra: Any) -> dict:
    return {
        "taskId": task_id,
        "status": status,
        "createdAt": created,
        "lastUpdatedAt": updated or created,
        "ttlMs": None,  # the approval's own expiry ends it; agentops keeps the record
        "pollIntervalMs": TASK_POLL_MS,
        **extra,
    }


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _error_text(result: types.CallToolResult) -> str:
    texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    return "\n".join(texts) or "the tool reported an error"


class GatingProxy:
    """The proxy's state: the upstream connection, its tools, the agentops session."""

    def __init__(
        self,
        agentops: AgentopsClient,
        upstream: Client,
        *,
        upstream_label: str = "",
        decision_timeout: float = 3600,
    ):
        self.agentops = agentops
        self.upstream = upstream
        self.upstream_label = upstream_label or "the MCP server"
        self.decision_timeout = decision_timeout
        self.tools: list[types.Tool] = []
        self.session: Session | None = None
        # Tasks this process handed out and not yet seen end: while any is left the session
        # stays open at stop, so a restarted proxy can still run and report them.
        self.open_tasks: set[str] = set()
        # One runner per approved task in this process (two polls must not run it twice).
        self._running: dict[str, anyio.Lock] = {}

    async def start(self, session_name: str = "") -> None:
        """List the upstream's tools, register them, open the session."""
        tools, cursor = [], None
        while True:
            page = await self.upstream.list_tools(cursor=cursor)
            tools += page.tools
            cursor = page.next_cursor
            if not cursor:
                break
        self.tools = tools
        definitions = [tool_definition(t) for t in tools]
        await anyio.to_thread.run_sync(self.agentops.register_mcp_tools, definitions)
        self.session = await anyio.to_thread.run_sync(
            lambda: self.agentops.session(
                session_name or "mcp proxy",
                metadata={"proxy": "agentops-mcp-proxy", "upstream": self.upstream_label},
            )
        )
        log.info("registered %d tool(s); session %s", len(tools), self.session.run_url)

    async def stop(self, failed: bool = False) -> None:
        if self.session is None:
            return
        session, self.session = self.session, None
        if self.open_tasks:
            log.warning(
                "%d task(s) still open: session %s left open for a restarted proxy to finish",
                len(self.open_tasks),
                session.id,
            )
            return

        def close() -> None:
            try:
                session.close("failed" if failed else "succeeded", detail="the MCP proxy stopped")
            except AgentopsError as exc:
                if exc.status != 409:  # 409: calls still wait for a decision; fail it then
                    raise
                session.close("failed", detail="the MCP proxy stopped with calls undecided")

        try:
            await anyio.to_thread.run_sync(close)
        except AgentopsError as exc:
            log.warning("could not close the agentops session: %s", exc)

    def server(self) -> Server:
        """The MCP server the proxy's client talks to."""

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            return types.ListToolsResult(tools=self.tools)

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
            task = wants_tasks(ctx, params)
            return await self.call(params.name, params.arguments or {}, task=task)

        async def get_task(ctx: Any, params: types.GetTaskRequestParams) -> dict:
            return await self.task_state(params.task_id)

        async def cancel_task(ctx: Any, params: types.CancelTaskRequestParams) -> dict:
            await self.cancel_task(params.task_id)
            return {}

        server = Server("agentops-mcp-proxy", on_list_tools=list_tools, on_call_tool=call_tool)
        server.add_request_handler("tasks/get", types.GetTaskRequestParams, get_task)
        server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, cancel_task)
        server.extensions[TASKS_EXTENSION] = {}
        return server

    async def _decided(self, session: Session, call_id: str) -> Decision:
        """The call's decision. A client that cancels its call, or a wait past
        --decision-timeout, withdraws the call in agentops (approvers see it withdrawn, and a
        later approval forwards nothing); the cancellation goes on at once (the abandoned
        poll's thread ends within CANCEL_POLL_SECONDS)."""
        try:
            return await anyio.to_thread.run_sync(
                lambda: session.wait_for(
                    call_id, timeout=self.decision_timeout, poll=CANCEL_POLL_SECONDS
                ),
                abandon_on_cancel=True,
            )
        except (anyio.get_cancelled_exc_class(), ApprovalTimeout) as exc:
            reason = (
                "the MCP client cancelled the call"
                if not isinstance(exc, ApprovalTimeout)
                else f"no decision within the proxy's {self.decision_timeout:.0f} s"
            )
            with anyio.CancelScope(shield=True):
                try:
                    await anyio.to_thread.run_sync(lambda: session.withdraw(call_id, reason=reason))
                except AgentopsError as error:
                    log.warning("could not withdraw call %s: %s", call_id, error)
            raise

    async def call(self, name: str, args: dict, *, task: bool = False) -> Any:
        """One tools/call: decided by agentops, forwarded only when approved. With `task`
        (the client takes tasks) a call that waits for a person answers at once with a task."""
        session = self.session
        if session is None:
            return error_result("agentops: the proxy has no session (not started or stopped)")
        if name not in {t.name for t in self.tools}:
            # Not the server's: nothing an approver should be asked about.
            return error_result(f"unknown tool {name!r}: the MCP server does not list it")
        summary = f"MCP tools/call {name} to {self.upstream_label}"
        try:
            call_id = f"{TASK_CALL_PREFIX}{uuid.uuid4()}" if task else ""
            answer = await anyio.to_thread.run_sync(
                lambda: session.submit(name, dict(args), summary=summary, call_id=call_id)
            )
            if answer["status"] == "pending" and task:
                # Submitted is durable (agentops holds the call): the task may be handed out.
                self.open_tasks.add(answer["call"])
                message = "waiting for a person to decide in agentops"
                created = _task(answer["call"], "working", _now(), statusMessage=message)
                return {"resultType": "task", **created}
            decision = (
                Decision.from_json(answer)
                if answer["status"] != "pending"
                else await self._decided(session, answer["call"])
            )
        except ApprovalTimeout:
            return error_result(
                f"agentops: no decision within {self.decision_timeout:.0f} s; not run"
            )
        except AgentopsError as exc:
            return error_result(f"agentops refused the call ({exc.status}): {exc.detail}")
        if not decision.approved:
            return error_result(deny_message(decision))
        return await self._forward(session, decision)

    async def _forward(self, session: Session, decision: Decision) -> types.CallToolResult:
        """Run an approved call on the upstream with the approved arguments; report it."""
        started = time.monotonic()
        try:
            result = await self.upstream.call_tool(decision.tool, decision.args)
        except Exception as exc:  # the upstream failed: the session records it, the client hears it
            result = error_result(f"the MCP server failed: {exc}")
        took = int((time.monotonic() - started) * 1000)

        def report() -> None:
            if result.is_error:
                session.report(decision, error=_error_text(result), duration_ms=took)
            else:
                session.report(decision, result=_result_json(result), duration_ms=took)

        try:
            await anyio.to_thread.run_sync(report)
        except AgentopsError as exc:
            log.warning("could not report the result of %s: %s", decision.tool, exc)
        return result

    async def _read_call(self, task_id: str) -> dict:
        """The task's call in agentops; an MCP error when it is not a task of this proxy's."""
        try:
            call = await anyio.to_thread.run_sync(
                lambda: self.agentops.request("GET", f"/api/external/calls/{task_id}")
            )
        except AgentopsError as exc:
            if exc.status not in (404, 422):
                raise MCPError(code=INTERNAL_ERROR, message=f"agentops: {exc.detail}") from None
            call = None
        mine = call is not None and str(call.get("call_id") or "").startswith(TASK_CALL_PREFIX)
        if not mine or call["tool"] not in {t.name for t in self.tools}:
            raise MCPError(code=INVALID_PARAMS, message=f"no such task: {task_id}")
        return call

    async def task_state(self, task_id: str) -> dict:
        """tasks/get: the task as its agentops call stands. An approved call not yet run is
        run now, once, and its result is what agentops recorded."""
        call = await self._read_call(task_id)
        created = call.get("created_at") or _now()
        updated = call.get("decided_at") or created
        if call["status"] == "pending":
            message = "waiting for a person to decide in agentops"
            return _task(task_id, "working", created, statusMessage=message)
        if call["status"] == "withdrawn":
            self.open_tasks.discard(task_id)
            return _task(task_id, "cancelled", created, updated, statusMessage=call["reason"])
        decision = Decision.from_json(call)
        if not decision.approved:
            self.open_tasks.discard(task_id)
            denied = error_result(deny_message(decision))
            return _task(task_id, "completed", created, updated, result=_result_json(denied))
        if call.get("reported") is None:
            call = await self._run_task(decision)
        self.open_tasks.discard(task_id)
        return _task(
            task_id, "completed", created, _now(), result=_reported_result(call["reported"])
        )

    async def _run_task(self, decision: Decision) -> dict:
        """Run an approved task's call and return the call as agentops then records it."""
        session = self.session
        if session is None:
            raise MCPError(code=INTERNAL_ERROR, message="the proxy is stopping")
        lock = self._running.setdefault(decision.call_id, anyio.Lock())
        async with lock:
            call = await self._read_call(decision.call_id)
            if call.get("reported") is None and call["status"] != "withdrawn":
                await self._forward(session, decision)
                call = await self._read_call(decision.call_id)
        self._running.pop(decision.call_id, None)
        if call.get("reported") is None:
            # Withdrawn meanwhile, or the report did not reach agentops.
            raise MCPError(code=INTERNAL_ERROR, message="the task's result was not recorded")
        return call

    async def cancel_task(self, task_id: str) -> None:
        """tasks/cancel: withdraw the call in agentops (a pending approval is withdrawn, and
        the call never runs). A task that already ended stays as it ended."""
        await self._read_call(task_id)  # an unknown task is an error
        session = self.session
        if session is None:
            raise MCPError(code=INTERNAL_ERROR, message="the proxy is stopping")
        reason = "the MCP client cancelled the task"
        try:
            await anyio.to_thread.run_sync(lambda: session.withdraw(task_id, reason=reason))
        except AgentopsError as exc:
            if exc.status != 409:  # 409: it already ran; cancellation comes too late
                raise MCPError(code=INTERNAL_ERROR, message=f"agentops: {exc.detail}") from None
        self.open_tasks.discard(task_id)


def _parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    argv = list(argv)
    command: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, command = argv[:at], argv[at + 1 :]
    parser = argparse.ArgumentParser(
        prog="agentops-mcp-proxy",
        description="Gate an MCP server's tool calls through agentops approvals.",
        epilog="The upstream is either `-- <command...>` (stdio) or --upstream-url.",
    )
    parser.add_argument("--agentops", default=os.environ.get("AGENTOPS_URL", ""))
    parser.add_argument(
        "--token",
        default=os.environ.get("AGENTOPS_TOKEN", ""),
        help="the agent's token (prefer the AGENTOPS_TOKEN environment variable)",
    )
    parser.add_argument("--upstream-url", default="", help="a streamable HTTP MCP server")
    parser.add_argument(
        "--listen",
        default="",
        metavar="HOST:PORT",
        help="serve MCP over streamable HTTP at http://HOST:PORT/mcp instead of stdio",
    )
    parser.add_argument("--session", default="", help="the agentops session's name")
    parser.add_argument(
        "--decision-timeout",
        type=float,
        default=3600,
        help="seconds a gated call held for a client without the Tasks extension waits for a "
        "person before it fails (default 3600); a task waits until the approval expires",
    )
    args = parser.parse_args(argv)
    if not args.agentops or not args.token:
        parser.error("--agentops (or AGENTOPS_URL) and AGENTOPS_TOKEN (or --token) are required")
    if bool(command) == bool(args.upstream_url):
        parser.error("give the upstream either as `-- <command...>` or as --upstream-url")
    if args.listen and ":" not in args.listen:
        parser.error("--listen takes HOST:PORT")
    return args, command


def _upstream(args: argparse.Namespace, command: list[str]) -> tuple[Any, str]:
    if args.upstream_url:
        return args.upstream_url, args.upstream_url
    env = {k: v for k, v in os.environ.items() if k not in PRIVATE_ENV}
    return StdioServerParameters(command=command[0], args=command[1:], env=env), " ".join(command)


async def serve(args: argparse.Namespace, command: list[str]) -> None:
    upstream, label = _upstream(args, command)
    agentops = AgentopsClient(args.agentops, args.token)
    async with AsyncExitStack() as stack:
        client = await stack.enter_async_context(Client(upstream))
        proxy = GatingProxy(
            agentops, client, upstream_label=label, decision_timeout=args.decision_timeout
        )
        await proxy.start(args.session)
        failed = True
        try:
            async with anyio.create_task_group() as tasks:
                # SIGTERM/SIGINT end the proxy normally: its session is closed below.
                tasks.start_soon(_stop_on_signal, tasks.cancel_scope)
                server = proxy.server()
                if args.listen:
                    await _serve_http(server, args.listen)
                else:
                    async with stdio_server() as (read, write):
                        await server.run(read, write, server.create_initialization_options())
                tasks.cancel_scope.cancel()
            failed = False
        finally:
            with anyio.CancelScope(shield=True):
                await proxy.stop(failed=failed)


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            scope.cancel()
            return


async def _serve_http(server: Server, listen: str) -> None:
    import uvicorn

    host, _, port = listen.rpartition(":")
    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(app, host=host, port=int(port), log_level="warning")
    log.info("serving MCP at http://%s:%s/mcp", host, port)
    await uvicorn.Server(config).serve()


def main(argv: Sequence[str] | None = None) -> None:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="agentops-mcp-proxy: %(message)s"
    )
    args, command = _parse(sys.argv[1:] if argv is None else argv)
    try:
        anyio.run(serve, args, command)
    except KeyboardInterrupt:
        pass
    except Exception as exc:
        refused = _agentops_error(exc)
        if refused is None:
            raise
        sys.exit(f"agentops-mcp-proxy: {refused}")


def _agentops_error(exc: BaseException) -> AgentopsError | None:
    """The AgentopsError in `exc`, which task groups may have wrapped in exception groups."""
    if isinstance(exc, AgentopsError):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _agentops_error(inner)
        if found is not None:
            return found
    return None


if __name__ == "__main__":
    main()
