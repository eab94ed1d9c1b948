"""Tools from MCP servers: an agent's catalogue entry names servers (stdio or streamable
HTTP) and takes their tools as its own.

A server's tools are listed when a run starts (its snapshot at launch), at most once every
`relist_seconds` per process (a cache), and wherever a process meets a tool of a declared
server it has not listed yet (`get_tool`'s resolver below). Each tool becomes an `McpTool`
in the tool registry under the server's prefix ("warehouse_reserve_stock"): the engine calls
it like any Python tool, so the ledger, deadlines, circuit breaker and gates all apply.

Risk: the server's annotations are hints from the server's side, so they may raise a tool's
risk and never lower it. A tool the agent does not declare starts irreversible with a medium
blast radius (gated by the base table); `destructiveHint` raises that to high; `readOnlyHint`
is only reported. The agent's owner says what a tool really is with `McpServer.risks` (a
hint can still raise it) or lets it through with GateRules.never_gate. The gateway's MCP
registration (gateway/mcp_tools.py) follows the same mapping.

Each call opens its own session (a stdio server is started for it and stopped after): slow
(a second or two for a Python server) but nothing outlives the call, on any worker.
"""

import asyncio
import concurrent.futures
import copy
import hashlib
import json
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pydantic
from mcp import Client, StdioServerParameters
from mcp import types as mcp_types
from mcp.client.stdio import get_default_environment
from mcp.shared.exceptions import MCPError

from agentkit.tools import (
    REGISTRY,
    RESOLVERS,
    Blast,
    Tool,
    ToolArgsError,
    ToolError,
    ToolInfraError,
)
from agentkit.verification import schema_errors

log = logging.getLogger("agentops.mcp")

# What the Messages API accepts as a tool name; a server's name is mapped onto it.
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")


def risk_of(annotations: Any) -> tuple[bool, Blast]:
    """(reversible, blast) of a tool nobody has vouched for, from its annotations: the unknown
    tool's risk, or more (destructiveHint); never less (readOnlyHint lowers nothing)."""
    hints = annotations if isinstance(annotations, dict) else {}
    if hints.get("destructiveHint") is True:
        return False, Blast.HIGH
    return False, Blast.MEDIUM


def read_only_hint(annotations: Any) -> bool:
    return isinstance(annotations, dict) and annotations.get("readOnlyHint") is True


def declared_risk(declared: tuple[bool, Blast] | None, annotations: Any) -> tuple[bool, Blast]:
    """The risk an agent's owner declared for a tool, raised by what its server hints
    (destructiveHint: irreversible, at least high), never lowered; undeclared: `risk_of`."""
    if declared is None:
        return risk_of(annotations)
    reversible, blast = declared
    if isinstance(annotations, dict) and annotations.get("destructiveHint") is True:
        return False, max(blast, Blast.HIGH)
    return reversible, blast


@dataclass(frozen=True)
class McpServer:
    """An MCP server an agent takes tools from: `command` (stdio: the server is started for
    each call) or `url` (streamable HTTP), one of the two."""

    name: str  # in tool names ("warehouse" -> "warehouse_reserve_stock") and in traces
    command: tuple[str, ...] = ()
    url: str = ""
    env: dict[str, str] = field(default_factory=dict)  # added to the SDK's safe default
    cwd: str | None = None
    # Which of its tools the agent takes (by the server's names); empty: all of them.
    tools: tuple[str, ...] = ()
    # The owner's word on a tool's risk, by the server's name: (reversible, blast). Hints may
    # raise it (declared_risk); a tool not named here starts at risk_of(annotations).
    risks: dict[str, tuple[bool, Blast]] = field(default_factory=dict)
    timeout_seconds: float = 30.0  # one call, a stdio server's start included
    relist_seconds: float = 60.0  # how old a listing may be when a run starts
    # The `_meta` field in which the server reads an idempotency key, if it honours one:
    # then a call whose outcome was not recorded is retried with the same key.
    idempotency_meta: str = ""
    prefix: str | None = None  # default: f"{name}_"

    def __post_init__(self):
        if bool(self.command) == bool(self.url):
            raise ValueError(f"MCP server {self.name}: give a command or a url, not both")
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]{0,30}", self.name):
            raise ValueError(f"MCP server name {self.name!r}: letters, digits, _ and - only")

    @property
    def tool_prefix(self) -> str:
        return self.prefix if self.prefix is not None else f"{self.name}_"

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "streamable-http"

    def local_name(self, remote: str) -> str:
        return (self.tool_prefix + _NAME_CHARS.sub("_", remote))[:64]

    def client(self) -> Client:
        if self.url:
            target: Any = self.url
        else:
            target = StdioServerParameters(
                command=self.command[0],
                args=list(self.command[1:]),
                env={**get_default_environment(), **self.env},
                cwd=self.cwd,
            )
        # No response cache: the listing's freshness is this module's (relist_seconds).
        return Client(target, read_timeout_seconds=self.timeout_seconds, cache=None)

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "transport": self.transport,
            "target": self.url or " ".join(self.command),
            "prefix": self.tool_prefix,
        }


class _Args(pydantic.BaseModel):
    # The server's JSON schema checks the arguments (McpTool.validate); the registry's
    # pydantic model is only a placeholder.
    model_config = pydantic.ConfigDict(extra="allow")


def _remote_call() -> None:  # pragma: no cover - McpTool.call never calls its fn
    raise NotImplementedError


@dataclass(frozen=True)
class McpTool(Tool):
    """A tool an MCP server offers, as the registry holds it."""

    server: McpServer | None = None
    remote_name: str = ""
    schema: dict = field(default_factory=lambda: {"type": "object"})
    annotations: dict = field(default_factory=dict)

    def input_schema(self) -> dict:
        return copy.deepcopy(self.schema)

    def validate(self, args: Any) -> dict:
        if not isinstance(args, dict):
            raise ToolArgsError(f"arguments for {self.name} must be an object")
        try:
            errors = schema_errors(self.schema, args)
        except Exception as exc:  # the server's schema, not ours: a call it cannot check fails
            raise ToolArgsError(
                f"{self.name}: its server's input schema cannot be checked ({exc})"[:300]
            ) from None
        if errors:
            raise ToolArgsError(
                f"invalid arguments for {self.name}: " + "; ".join(errors),
                [{"loc": [], "msg": e} for e in errors],
            )
        return json.loads(json.dumps(args))

    def call(self, args: dict, ctx) -> Any:
        meta = (
            {self.server.idempotency_meta: ctx.idempotency_key}
            if self.accepts_idempotency_key
            else None
        )
        timeout = max(0.1, min(self.timeout_seconds, ctx.seconds_left or self.timeout_seconds))
        result = _run(self._call(args, meta), timeout)
        if result.is_error:
            raise ToolError(_text(result) or f"{self.remote_name} reported an error")
        if result.structured_content is not None:
            return result.structured_content
        text = _text(result)
        try:  # a server that returns an object as JSON text: the timeline shows the object
            return json.loads(text)
        except ValueError:
            return text

    async def _call(self, args: dict, meta: dict | None) -> mcp_types.CallToolResult:
        async with self.server.client() as client:
            # A 2026-07-28 server wants the tool listed on this connection before the call.
            await client.list_tools()
            return await client.call_tool(self.remote_name, args, meta=meta)

    def metadata(self) -> dict:
        return {
            **super().metadata(),
            "mcp": {
                "server": self.server.name,
                "tool": self.remote_name,
                "annotations": self.annotations,
                "read_only_hint": read_only_hint(self.annotations),
            },
        }

    def fingerprint(self) -> str:
        what = {
            "server": self.server.as_dict(),
            "tool": self.remote_name,
            "schema": self.schema,
            "annotations": self.annotations,
        }
        return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def _text(result: mcp_types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, mcp_types.TextContent))


def _run(coro, timeout: float) -> Any:
    """Run one MCP exchange to the end on an event loop of its own; transport failures are
    infrastructure errors (retried per the tool's policy), a JSON-RPC error is the tool's."""

    async def bounded():
        return await asyncio.wait_for(coro, timeout)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        runner = asyncio.run
    else:  # called from async code (a test, a consumer): its loop must not be blocked on

        def runner(c):
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                return pool.submit(asyncio.run, c).result()

    try:
        return runner(bounded())
    except (MCPError, TimeoutError, OSError, ExceptionGroup, pydantic.ValidationError) as exc:
        # The transport's task groups may wrap the error: its first leaf says what it was.
        cause = _leaf(exc)
        if isinstance(cause, MCPError):  # the server answered: the call's own error
            raise ToolError(f"MCP error {cause.error.code}: {cause.error.message}") from exc
        if isinstance(cause, TimeoutError):
            raise ToolInfraError(f"the MCP server did not answer within {timeout:g}s") from exc
        reason = f"{type(cause).__name__}: {cause}"[:300]
        raise ToolInfraError(f"the MCP server could not be reached: {reason}") from exc


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


# --- listing -------------------------------------------------------------------------------

SERVERS: dict[str, McpServer] = {}  # by name: the servers agents declared
_listed: dict[str, tuple[float, list[McpTool]]] = {}
_lock = threading.Lock()


def declare(server: McpServer) -> None:
    """Called by agents.register: a server two agents declare must be the same server."""
    held = SERVERS.get(server.name)
    if held is not None and held != server:
        raise ValueError(f"two MCP servers named {server.name!r}: name them apart")
    SERVERS[server.name] = server


def tools_of(server: McpServer, *, max_age: float | None = None) -> list[McpTool]:
    """The server's tools as registry entries, listed afresh when the last listing is older
    than `max_age` (default: the server's relist_seconds). A server that cannot be reached
    keeps its last listing; with none, McpUnavailable."""
    max_age = server.relist_seconds if max_age is None else max_age
    with _lock:
        held = _listed.get(server.name)
    if held is not None and time.monotonic() - held[0] < max_age:
        return held[1]
    try:
        definitions = _run(_list(server), server.timeout_seconds)
    except (ToolError, ToolInfraError) as exc:
        if held is not None:
            log.warning("MCP server %s: listing failed (%s); last listing kept", server.name, exc)
            return held[1]
        raise McpUnavailable(f"MCP server {server.name}: {exc}") from exc
    tools = [t for t in (_tool(server, d) for d in definitions) if t is not None]
    with _lock:
        for t in tools:
            REGISTRY[t.name] = t
        _listed[server.name] = (time.monotonic(), tools)
    return tools


class McpUnavailable(Exception):
    """A server that could not be listed (and never was)."""


async def _list(server: McpServer) -> list[dict]:
    async with server.client() as client:
        tools, cursor = [], None
        for _ in range(100):  # a paginator that never ends must not hang a launch
            page = await client.list_tools(cursor=cursor)
            tools += page.tools
            cursor = page.next_cursor
            if not cursor:
                break
    return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]


def _tool(server: McpServer, definition: dict) -> McpTool | None:
    remote = definition.get("name", "")
    if server.tools and remote not in server.tools:
        return None
    name = server.local_name(remote)
    held = REGISTRY.get(name)
    if held is not None and not isinstance(held, McpTool):
        log.warning(
            "MCP server %s: %s would hide the Python tool %s; left out", server.name, remote, name
        )
        return None
    annotations = definition.get("annotations") or {}
    reversible, blast = declared_risk(server.risks.get(remote), annotations)
    schema = definition.get("inputSchema") or {"type": "object"}
    schema = {k: v for k, v in schema.items() if k != "title"}
    return McpTool(
        name=name,
        description=(definition.get("description") or remote)[:4000],
        fn=_remote_call,
        args_model=_Args,
        reversible=reversible,
        blast=blast,
        accepts_idempotency_key=bool(server.idempotency_meta),
        timeout_seconds=server.timeout_seconds,
        server=server,
        remote_name=remote,
        schema=schema,
        annotations=annotations,
    )


def resolve(name: str) -> Tool | None:
    """A tool of a declared server this process has not listed yet (a worker or web process
    that did not launch the run): its server is listed, once per relist period."""
    for server in SERVERS.values():
        if name.startswith(server.tool_prefix):
            try:
                tools = tools_of(server)
            except McpUnavailable:
                log.warning("MCP server %s unavailable while looking up %s", server.name, name)
                return None
            found = next((t for t in tools if t.name == name), None)
            if found is not None:
                return found
    return None


RESOLVERS.append(resolve)


def forget() -> None:
    """Drop every listing (tests)."""
    with _lock:
        for _, tools in _listed.values():
            for t in tools:
                if REGISTRY.get(t.name) is t:
                    del REGISTRY[t.name]
        _listed.clear()
