"""Tools from MCP servers: an agent's catalogue entry names servers (stdio or streamable
HTTP) and takes their tools as its own.
Why and how: docs/design/modules.md."""

import asyncio
import atexit
import copy
import functools
import hashlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

import pydantic
from mcp import Client, StdioServerParameters
from mcp import types as mcp_types
from mcp.client.stdio import get_default_environment
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT, RequestParamsMeta

from agentkit.previews import Change
from agentkit.tools import (
    REGISTRY,
    RESOLVERS,
    Blast,
    Tool,
    ToolArgsError,
    ToolContext,
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
    idle_seconds: float = 300.0  # a kept session unused this long is closed
    # The `_meta` field in which the server reads an idempotency key, if it honours one:
    # then a call whose outcome was not recorded is retried with the same key.
    idempotency_meta: str = ""
    prefix: str | None = None  # default: f"{name}_"
    # Effect previews (agentkit/previews.py), by the server's tool names: the server's own
    # read-only tool that says what a call would change, called with the same arguments when
    # the gate opens and again at the decision: {"reserve_stock": "preview_reserve_stock"}.
    # Its result: {"changes": [{"subject", "before", "after"}, ...]} (or the list alone).
    previews: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
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
        return Client(
            target,
            read_timeout_seconds=self.timeout_seconds,
            cache=None,
            message_handler=functools.partial(_on_message, self.name),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "transport": self.transport,
            "target": self.url or " ".join(self.command),
            "prefix": self.tool_prefix,
            **({"previews": dict(sorted(self.previews.items()))} if self.previews else {}),
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

    # Always given (keyword-only: Tool's fields before it have defaults).
    server: McpServer = field(kw_only=True)
    remote_name: str = ""
    schema: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    annotations: dict[str, Any] = field(default_factory=dict)

    def input_schema(self) -> dict[str, Any]:
        return copy.deepcopy(self.schema)

    def validate(self, args: Any) -> dict[str, Any]:
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
        checked: dict[str, Any] = json.loads(json.dumps(args))
        return checked

    def call(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        # The key is the server's own (McpServer.idempotency_meta): a TypedDict's extra item.
        meta = (
            cast(RequestParamsMeta, {self.server.idempotency_meta: ctx.idempotency_key})
            if self.accepts_idempotency_key
            else None
        )
        timeout = max(0.1, min(self.timeout_seconds, ctx.seconds_left or self.timeout_seconds))
        result = connections.run(
            self.server, lambda client: client.call_tool(self.remote_name, args, meta=meta), timeout
        )
        return _value(result, self.remote_name)

    def metadata(self) -> dict[str, Any]:
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


def _value(result: mcp_types.CallToolResult, remote_name: str) -> Any:
    """A call's answer: its structured content, else its text (parsed when it is JSON); a
    ToolError when the server reported one."""
    if result.is_error:
        raise ToolError(_text(result) or f"{remote_name} reported an error")
    if result.structured_content is not None:
        return result.structured_content
    text = _text(result)
    try:  # a server that returns an object as JSON text: the timeline shows the object
        return json.loads(text)
    except ValueError:
        return text


def _text(result: mcp_types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, mcp_types.TextContent))


class _Held:
    """One server's kept session: a task of the connections' loop holds it open (the SDK's
    task groups are entered and left by one task) until `done` or until it fails."""

    def __init__(self, server: McpServer):
        self.server = server
        self.ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self.done = asyncio.Event()
        self.broken = False
        self.used = time.monotonic()  # when its last exchange began or ended
        self.busy = 0  # exchanges under way: never idle meanwhile
        self.task = asyncio.ensure_future(self._hold())

    async def _hold(self) -> None:
        try:
            async with self.server.client() as client:
                # A 2026-07-28 server wants the tools listed on a connection before a call.
                await client.list_tools()
                self.ready.set_result(client)
                listening = asyncio.ensure_future(self._listen(client))
                try:
                    await self.done.wait()
                finally:
                    listening.cancel()
                    await asyncio.gather(listening, return_exceptions=True)
        except BaseException as exc:
            if not self.ready.done():
                self.ready.set_exception(exc)
            elif not isinstance(exc, asyncio.CancelledError):
                log.warning("MCP server %s: the kept session ended: %s", self.server.name, exc)
        finally:
            self.broken = True

    async def _listen(self, client: Client) -> None:
        """Changes of the server's tools (a 2026-07-28 server's subscription stream; an
        older one notifies through the client's message_handler, _on_message)."""
        try:
            async with client.listen(tools_list_changed=True) as changes:
                async for _ in changes:
                    _tools_changed(self.server.name)
        except ListenNotSupportedError:
            return
        except (MCPError, SubscriptionLost, TimeoutError) as exc:
            log.info("MCP server %s: no tool-change stream (%s)", self.server.name, exc)


# What is done on a server's session: a call, a listing.
Exchange = Callable[[Client], Awaitable[Any]]


class _Connections:
    """The kept sessions of this process, on an event loop of their own (a daemon thread)
    that any thread hands its MCP exchanges to. A forked child starts with none."""

    REAP_SECONDS = 5.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = 0
        self.held: dict[str, _Held] = {}

    def run(self, server: McpServer, exchange: Exchange, timeout: float) -> Any:
        """`await exchange(client)` on the server's kept session, within `timeout` seconds;
        transport failures are infrastructure errors (retried per the tool's policy), a
        JSON-RPC error is the tool's."""
        future = asyncio.run_coroutine_threadsafe(self._run(server, exchange, timeout), self.loop)
        try:
            return future.result()
        except (MCPError, TimeoutError, OSError, ExceptionGroup, pydantic.ValidationError) as exc:
            raise _tool_error(exc, timeout) from exc

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():
                self._pid, self.held = os.getpid(), {}
                self._loop = asyncio.new_event_loop()
                threading.Thread(
                    target=self._loop.run_forever, name="mcp-sessions", daemon=True
                ).start()
                asyncio.run_coroutine_threadsafe(self._reap(), self._loop)
            return self._loop

    async def _run(self, server: McpServer, exchange: Exchange, timeout: float) -> Any:
        async def attempt() -> Any:
            held = self.held.get(server.name)
            if held is not None and held.server != server:  # declared anew, otherwise
                held.done.set()
                held = None
            if held is None or held.broken:
                held = self.held[server.name] = _Held(server)
            held.used, held.busy = time.monotonic(), held.busy + 1
            try:
                client = await asyncio.shield(held.ready)
                return await exchange(client)
            except MCPError as exc:
                if exc.error.code not in _TRANSPORT_CODES:
                    raise  # the server answered: the session is sound
                held.done.set()
                raise
            except BaseException:
                held.done.set()  # in doubt: the next call opens another session
                raise
            finally:
                held.used, held.busy = time.monotonic(), held.busy - 1

        return await asyncio.wait_for(attempt(), timeout)

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(self.REAP_SECONDS)
            self.reap_idle()

    def reap_idle(self) -> None:
        """Close the sessions idle for their server's idle_seconds (on the loop)."""
        now = time.monotonic()
        for name, held in list(self.held.items()):
            idle = not held.busy and now - held.used > held.server.idle_seconds
            if held.broken or idle:
                held.done.set()
                if self.held.get(name) is held:
                    del self.held[name]

    def close_all(self) -> None:
        """Close every kept session (tests; a stdio server stops with its session)."""
        if self._loop is None or self._pid != os.getpid():
            return

        async def close() -> None:
            held, self.held = list(self.held.values()), {}
            for h in held:
                h.done.set()
            await asyncio.gather(*(h.task for h in held), return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
        except (TimeoutError, RuntimeError) as exc:  # a server that will not stop
            log.warning("MCP sessions not all closed: %s", exc)


connections = _Connections()
# Closed on the way out: a stdio server whose pipe just broke would print its traceback.
atexit.register(connections.close_all)


async def _on_message(server_name: str, message: Any) -> None:
    if getattr(message, "method", "") == "notifications/tools/list_changed":
        _tools_changed(server_name)


def _tools_changed(server_name: str) -> None:
    """A server said its tools changed: the next run start lists them again."""
    log.info("MCP server %s: its tools changed; listed again at the next run", server_name)
    with _lock:
        _listed.pop(server_name, None)


# What the SDK raises as an MCPError when no answer came (the connection closed, the request
# timed out): infrastructure, not the server's answer.
_TRANSPORT_CODES = (CONNECTION_CLOSED, REQUEST_TIMEOUT)


def _tool_error(exc: BaseException, timeout: float) -> ToolError | ToolInfraError:
    """What a failed MCP exchange is to the engine: the server's JSON-RPC error is the call's
    own (ToolError); a transport failure or a timeout is infrastructure (ToolInfraError)."""
    # The transport's task groups may wrap the error: its first leaf says what it was.
    cause = _leaf(exc)
    if isinstance(cause, MCPError) and cause.error.code in _TRANSPORT_CODES:
        return ToolInfraError(f"the MCP server's connection failed: {cause.error.message}")
    if isinstance(cause, MCPError):
        return ToolError(f"MCP error {cause.error.code}: {cause.error.message}")
    if isinstance(cause, TimeoutError):
        return ToolInfraError(f"the MCP server did not answer within {timeout:g}s")
    reason = f"{type(cause).__name__}: {cause}"[:300]
    return ToolInfraError(f"the MCP server could not be reached: {reason}")


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
        definitions = _listing(server)
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


def _listing(server: McpServer) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = connections.run(server, _list, server.timeout_seconds)
    return listed


async def _list(client: Client) -> list[dict[str, Any]]:
    tools, cursor = [], None
    for _ in range(100):  # a paginator that never ends must not hang a launch
        page = await client.list_tools(cursor=cursor)
        tools += page.tools
        cursor = page.next_cursor
        if not cursor:
            break
    return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]


def _tool(server: McpServer, definition: dict[str, Any]) -> McpTool | None:
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
    has_preview = remote in server.previews
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
        preview=_RemotePreview(server, server.previews[remote]) if has_preview else None,
    )


@dataclass(frozen=True)
class _RemotePreview:
    """A tool's effect preview computed by its server (McpServer.previews): the server's
    preview tool, called with the call's arguments; its changes as previews.Change."""

    server: McpServer
    remote_name: str

    def __call__(self, args: dict[str, Any]) -> list[Change]:
        result = connections.run(
            self.server,
            lambda client: client.call_tool(self.remote_name, args),
            self.server.timeout_seconds,
        )
        body = _value(result, self.remote_name)
        changes = body.get("changes") if isinstance(body, dict) else body
        if not isinstance(changes, list):
            raise ToolError(f"{self.remote_name} did not answer a list of changes")
        return [
            Change(str(c.get("subject", "")), c.get("before"), c.get("after"))
            for c in changes
            if isinstance(c, dict)
        ]


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
    """Drop every listing and close every kept session (tests)."""
    connections.close_all()
    with _lock:
        for _, tools in _listed.values():
            for t in tools:
                if REGISTRY.get(t.name) is t:
                    del REGISTRY[t.name]
        _listed.clear()
