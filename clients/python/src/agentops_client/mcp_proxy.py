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
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from typing import Any

from .claude import CANCEL_POLL_SECONDS, deny_message
from .client import AgentopsClient, AgentopsError, ApprovalTimeout, Decision, Session

try:
    import anyio
    import mcp.types as types
    from mcp import Client, StdioServerParameters
    from mcp.server import Server
    from mcp.server.stdio import stdio_server
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "the MCP proxy needs the MCP SDK: pip install 'agentops-client[mcp]'"
    ) from exc

log = logging.getLogger("agentops.mcp_proxy")

# Environment the upstream command must not inherit: the agent's credential is the proxy's.
PRIVATE_ENV = ("AGENTOPS_TOKEN",)


def tool_definition(tool: types.Tool) -> dict:
    """An MCP Tool as JSON (the wire names: inputSchema, annotations.readOnlyHint...)."""
    return tool.model_dump(mode="json", by_alias=True, exclude_none=True)


def error_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def _result_json(result: types.CallToolResult) -> dict:
    body = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    body.pop("_meta", None)
    return body


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

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            return await self.call(params.name, params.arguments or {})

        return Server("agentops-mcp-proxy", on_list_tools=list_tools, on_call_tool=call_tool)

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

    async def call(self, name: str, args: dict) -> types.CallToolResult:
        """One tools/call: decided by agentops, forwarded only when approved."""
        session = self.session
        if session is None:
            return error_result("agentops: the proxy has no session (not started or stopped)")
        if name not in {t.name for t in self.tools}:
            # Not the server's: nothing an approver should be asked about.
            return error_result(f"unknown tool {name!r}: the MCP server does not list it")
        summary = f"MCP tools/call {name} to {self.upstream_label}"
        try:
            answer = await anyio.to_thread.run_sync(
                lambda: session.submit(name, dict(args), summary=summary)
            )
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
        started = time.monotonic()
        try:
            result = await self.upstream.call_tool(name, decision.args)
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
            log.warning("could not report the result of %s: %s", name, exc)
        return result


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
        help="seconds a gated call waits for a person before it fails (default 3600)",
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
