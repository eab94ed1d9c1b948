"""A local fake of the Anthropic Messages API, for tests, benchmarks and offline demos (test
support: no product code imports it).

It speaks enough of `POST /v1/messages` for the official SDK to take it for the real thing:
message JSON with id, type, role, model, content, stop_reason and usage (cache fields
included), a `request-id` header, and the API's error bodies. It also refuses what the real
API refuses, with its status (400), error type and message (no key; max_tokens below 1; a
message with empty content or an empty text block; a tool_use without a tool_result at the
start of the next message, a text block before those results, or a tool_result without its
tool_use; tool_use input that is not an object; a tool whose name is not
`^[a-zA-Z0-9_-]{1,128}$` or that has no input_schema; a final assistant message (prefill)
ending in whitespace), so a client bug shows up here rather than in production. Like the real
API it stops at `max_tokens`: a reply longer than that (about 4 bytes of its JSON a token) is
cut there, with stop_reason "max_tokens" (a tool call that does not fit is left out).

In Python (tests, bench)::

    with FakeMessagesServer(latency=0.05) as server:
        server.push(
            reply([tool_use("list_tables")]),
            rate_limited(retry_after=0.2),  # a fault costs one request, then the script moves on
            reply([text("Done.")], usage={"cache_read_input_tokens": 900}),
        )
        # point settings.ANTHROPIC_BASE_URL at server.base_url, run the client, then:
        server.requests[1].body["messages"]  # what the client sent, headers in .headers
        server.max_in_flight  # the most requests it was answering at once

Scripted items are used one per accepted request, in order; an item may also be a function
of the request body returning a Reply or a Fault. Faults: `rate_limited` (429 with
retry-after), `overloaded` (529), `server_error` (500), `bad_request` (400), `hang` (never
answers; the client must time out), `garbled` (a 200 whose body is not a message, like a
misbehaving proxy's), and `malformed_tool_input` (a tool_use whose input is not what the
tool's schema asks for, or not an object at all).

A request with `"stream": true` is answered as the real API streams: server-sent events
message_start, content_block_start / content_block_delta (text_delta, input_json_delta) /
content_block_stop per block, message_delta (stop_reason, usage), message_stop, the text cut
into pieces of `stream_chunk` characters `stream_delay` seconds apart (after the latency, which
is the time to the first event). A Reply's `stream_fault` breaks such a stream on purpose after
`fault_after` events: `broken_stream` (the connection drops), `error_mid_stream` (an error
event, as the API sends when overloaded mid-answer) and `truncated_stream` (the events stop
before message_stop, the connection closes cleanly). A plain request gets the Reply whole.

Prompt caching is answered as the real API answers it, from a cache of prefix hashes: the
request is read as one list of blocks in the order tools, system, messages; at each block
with `cache_control` (at most 4, else 400) the prefix up to it is looked up (there, and at the
20 blocks before it, the API's lookback), for this model and key. The longest prefix found is
read from the cache (`cache_read_input_tokens`); from there to the last breakpoint is written
(`cache_creation_input_tokens`) and kept `cache_ttl` seconds (5 minutes, renewed by a read),
or an hour for a breakpoint with `"ttl": "1h"` (each written span counted under its breakpoint's
time to live in `cache_creation`; a 1h breakpoint after a 5m one is a 400, as there);
the rest is `input_tokens`. A prefix under `cache_min_tokens` (1024, as for most models) is
neither written nor read. Tokens are estimated at about 4 bytes of JSON each; `server.cache`
holds the entries, `server.cache.clear()` empties it.

When the script is empty the default policy answers, deterministically and per conversation
(so concurrent runs do not disturb each other): while the conversation has fewer than
`tool_turns` assistant turns, call the first offered tool that takes no required arguments;
otherwise end the turn with a short text. The engine stops a run that repeats an identical
call three times, so `tool_turns` above 2 with a single argument-free tool ends in
"no progress".

From the command line, for a person pointing the app at it (any API key is accepted unless
--api-key is given)::

    uv run python -m tests.support.fake_messages_api --port 8765 --latency 0.5 --tool-turns 1
    ANTHROPIC_API_KEY=fake ANTHROPIC_BASE_URL=http://127.0.0.1:8765 uv run manage.py up
"""

import argparse
import contextlib
import hashlib
import json
import re
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentkit.llm.scripted import text, tool_use

__all__ = [
    "FakeMessagesServer",
    "Fault",
    "RecordedRequest",
    "Reply",
    "bad_request",
    "broken_stream",
    "error_mid_stream",
    "garbled",
    "hang",
    "malformed_tool_input",
    "overloaded",
    "rate_limited",
    "reply",
    "server_error",
    "text",
    "tool_use",
    "truncated_stream",
]


@dataclass(frozen=True)
class Reply:
    """One assistant message. stop_reason defaults to tool_use when a tool is called."""

    content: list[dict]
    stop_reason: str | None = None
    usage: dict = field(default_factory=dict)  # overrides the estimated token counts
    latency: float | None = None  # overrides the server's latency for this reply
    stream_fault: str = ""  # "cut", "error" or "truncated": how a streamed answer breaks
    fault_after: int = 3  # events sent before it breaks


@dataclass(frozen=True)
class Fault:
    """An error answer (status, error type, message, headers), or a request never answered."""

    status: int
    error_type: str
    message: str
    headers: dict = field(default_factory=dict)
    hang: bool = False
    raw_body: str | None = None  # sent verbatim instead of an error body


Item = Reply | Fault | Callable[[dict], Reply | Fault]


def reply(content: list[dict], **kwargs: Any) -> Reply:
    return Reply(content=content, **kwargs)


def broken_stream(content: list[dict], after: int = 3) -> Reply:
    """Streamed: the connection drops after `after` events."""
    return Reply(content=content, stream_fault="cut", fault_after=after)


def error_mid_stream(content: list[dict], after: int = 3) -> Reply:
    """Streamed: an overloaded_error event after `after` events, and the stream ends."""
    return Reply(content=content, stream_fault="error", fault_after=after)


def truncated_stream(content: list[dict], after: int = 3) -> Reply:
    """Streamed: the events stop after `after`, without message_stop; the body ends."""
    return Reply(content=content, stream_fault="truncated", fault_after=after)


def rate_limited(retry_after: float = 1.0) -> Fault:
    return Fault(
        429,
        "rate_limit_error",
        "Number of request tokens has exceeded your per-minute rate limit.",
        headers={"retry-after": _seconds(retry_after)},
    )


def overloaded() -> Fault:
    return Fault(529, "overloaded_error", "Overloaded")


def server_error() -> Fault:
    return Fault(500, "api_error", "Internal server error")


def bad_request(message: str = "messages: invalid request") -> Fault:
    return Fault(400, "invalid_request_error", message)


def hang() -> Fault:
    return Fault(0, "", "", hang=True)


def garbled(body: str = "<html><body>502 Bad Gateway</body></html>", status: int = 200) -> Fault:
    """What a misbehaving proxy sends: not a message, whatever the status says."""
    content_type = "application/json" if body[:1] in "{[" else "text/html"
    return Fault(status, "", "", headers={"content-type": content_type}, raw_body=body)


def malformed_tool_input(name: str | None = None, input: Any = "not an object") -> Callable:
    """A tool_use of `name` (default: the first offered tool) with input the tool can't take."""

    def build(body: dict) -> Reply:
        tool_name = name or ((body.get("tools") or [{}])[0].get("name") or "unknown_tool")
        block = {**tool_use(tool_name), "input": input}
        return Reply([text(f"Calling {tool_name}."), block])

    return build


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: Any  # parsed JSON, or None when the body was not JSON
    received_at: float  # time.monotonic()


class FakeMessagesServer:
    """A threaded HTTP server on 127.0.0.1; port 0 picks a free port (see base_url)."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        latency: float = 0.0,
        tool_turns: int = 0,
        api_key: str | None = None,
        hang_seconds: float = 120.0,
        verbose: bool = False,
        stream_delay: float = 0.0,
        stream_chunk: int = 12,
        cache_min_tokens: int = 1024,
        cache_ttl: float = 300.0,
    ):
        self.latency = latency
        self.cache_min_tokens = cache_min_tokens
        self.cache_ttl = cache_ttl
        self.cache: dict[str, float] = {}  # prefix hash -> expiry (time.monotonic())
        self.stream_delay = stream_delay
        self.stream_chunk = stream_chunk
        self.tool_turns = tool_turns
        self.api_key = api_key
        self.hang_seconds = hang_seconds
        self.verbose = verbose
        self.requests: list[RecordedRequest] = []
        self._script: deque[Item] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self.connections_opened = 0
        self.in_flight = 0  # requests being answered now
        self.max_in_flight = 0  # the most answered at once so far
        self._httpd = _HTTPServer((host, port), _Handler)
        self._httpd.fake = self
        self._thread: threading.Thread | None = None

    # --- lifecycle ---
    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FakeMessagesServer":
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-messages-api",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes hanging and sleeping handlers
        self._httpd.shutdown()
        self._httpd.server_close()
        # Keep-alive connections would otherwise hold their handler threads open.
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "FakeMessagesServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- script ---
    def push(self, *items: Item) -> None:
        with self._lock:
            self._script.extend(items)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._script)

    def messages_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path == "/v1/messages"]

    # --- answering ---
    def handle(
        self, method: str, path: str, headers: dict[str, str], raw: bytes
    ) -> tuple[int, dict[str, str], dict | bytes | Iterator[bytes]] | None:
        """(status, headers, body) for one request, or None to close without answering. A
        streamed body is an iterator of server-sent events, written as they come."""
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return self._handle(method, path, headers, raw)
        finally:
            with self._lock:
                self.in_flight -= 1

    def _handle(
        self, method: str, path: str, headers: dict[str, str], raw: bytes
    ) -> tuple[int, dict[str, str], dict | bytes | Iterator[bytes]] | None:
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        path = path.split("?", 1)[0]
        with self._lock:
            self.requests.append(RecordedRequest(method, path, headers, body, time.monotonic()))
        if method != "POST" or path != "/v1/messages":
            return self._error(Fault(404, "not_found_error", f"no route {method} {path}"))
        auth = self._check_auth(headers)
        if auth:
            return self._error(Fault(401, "authentication_error", auth))
        problem = validate_messages_request(body)
        if problem:
            return self._error(bad_request(problem))
        with self._lock:
            item = self._script.popleft() if self._script else None
        answer = self._default_reply(body) if item is None else item
        if callable(answer):
            answer = answer(body)
        if isinstance(answer, Fault):
            if answer.hang:
                self._stopping.wait(self.hang_seconds)
                return None
            self._sleep(self.latency)
            return self._error(answer)
        self._sleep(self.latency if answer.latency is None else answer.latency)
        message = self._message(body, raw, answer)
        if body.get("stream") is True:
            headers = {**self._headers(), "content-type": "text/event-stream"}
            return 200, headers, self._events(message, answer)
        return 200, self._headers(), message

    def _check_auth(self, headers: dict[str, str]) -> str:
        given = headers.get("x-api-key") or ""
        bearer = headers.get("authorization") or ""
        if bearer.lower().startswith("bearer "):
            given = given or bearer[7:].strip()
        if not given:
            return "x-api-key or Authorization: Bearer header is required"
        if self.api_key is not None and given != self.api_key:
            return "invalid x-api-key"
        return ""

    def _default_reply(self, body: dict) -> Reply:
        turns = sum(1 for m in body["messages"] if m.get("role") == "assistant")
        if turns < self.tool_turns:
            for tool in body.get("tools") or []:
                if not (tool.get("input_schema") or {}).get("required"):
                    return Reply([text(f"Let me call {tool['name']}."), tool_use(tool["name"])])
        return Reply([text(f"Fake answer after {turns} earlier turn(s).")])

    def _message(self, body: dict, raw: bytes, answer: Reply) -> dict:
        content = [
            {**b, "id": b.get("id") or f"toolu_{uuid.uuid4().hex[:24]}"}
            if b.get("type") == "tool_use"
            else b
            for b in answer.content
        ]
        stop = answer.stop_reason or (
            "tool_use" if any(b.get("type") == "tool_use" for b in content) else "end_turn"
        )
        content, cut = _cut_at(content, int(body["max_tokens"]))
        if cut:
            stop = "max_tokens"
        # Roughly 4 bytes per token, like English text and JSON.
        read, written, written_1h = self._cached(body)
        usage = {
            "input_tokens": max(1, len(raw) // 4 - read - written),
            "output_tokens": min(max(1, _tokens(content)), int(body["max_tokens"])),
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": written - written_1h,
                "ephemeral_1h_input_tokens": written_1h,
            },
            "service_tier": "standard",
            **answer.usage,
        }
        return {
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }

    def _cached(self, body: dict) -> tuple[int, int, int]:
        """(tokens read from the cache, tokens written to it, of which kept an hour) for this
        request, the cache updated (see the module's docstring)."""
        blocks = _prefix_blocks(body)
        marks = [i for i, (_, marked) in enumerate(blocks) if marked]
        if not marks:
            return 0, 0, 0
        sizes, hashes = [], []
        running = hashlib.sha256(f"{body['model']}".encode())
        for block, _ in blocks:
            running.update(block.encode())
            hashes.append(running.hexdigest())
            sizes.append((sizes[-1] if sizes else 0) + max(1, len(block) // 4))
        now = time.monotonic()
        with self._lock:
            self.cache = {h: until for h, until in self.cache.items() if until > now}
            hit = -1
            for mark in marks:
                for i in range(mark, max(-1, mark - 20), -1):
                    if hashes[i] in self.cache and i > hit:
                        hit = i
                        break
            last = marks[-1]
            read = sizes[hit] if hit >= 0 else 0
            if hit >= 0:
                self.cache[hashes[hit]] = now + self.cache_ttl
            written = written_1h = 0
            if sizes[last] >= self.cache_min_tokens and last > hit:
                written = sizes[last] - read
                start = read
                for mark in marks:
                    if mark > hit and sizes[mark] >= self.cache_min_tokens:
                        hour = blocks[mark][1] == "1h"
                        self.cache[hashes[mark]] = now + (3600.0 if hour else self.cache_ttl)
                        written_1h += sizes[mark] - start if hour else 0
                        start = sizes[mark]
        return read, written, written_1h

    def _events(self, message: dict, answer: Reply) -> Iterator[bytes]:
        """The message as the API streams it, with the Reply's fault if it has one."""
        usage = message["usage"]
        start = {
            **message,
            "content": [],
            "stop_reason": None,
            "usage": {**usage, "output_tokens": 1},
        }
        events: list[tuple[str, dict]] = [("message_start", {"message": start})]
        for i, block in enumerate(message["content"]):
            if block["type"] == "text":
                events.append(
                    ("content_block_start", {"index": i, "content_block": {**block, "text": ""}})
                )
                value, size = block["text"], max(1, self.stream_chunk)
                for piece in (value[j : j + size] for j in range(0, len(value), size)):
                    delta = {"type": "text_delta", "text": piece}
                    events.append(("content_block_delta", {"index": i, "delta": delta}))
            elif block["type"] == "tool_use":
                events.append(
                    ("content_block_start", {"index": i, "content_block": {**block, "input": {}}})
                )
                whole = json.dumps(block["input"])
                for piece in (whole[: len(whole) // 2], whole[len(whole) // 2 :]):
                    delta = {"type": "input_json_delta", "partial_json": piece}
                    events.append(("content_block_delta", {"index": i, "delta": delta}))
            else:
                events.append(("content_block_start", {"index": i, "content_block": block}))
            events.append(("content_block_stop", {"index": i}))
        delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
        events.append(
            ("message_delta", {"delta": delta, "usage": {"output_tokens": usage["output_tokens"]}})
        )
        events.append(("message_stop", {}))
        for n, (name, data) in enumerate(events):
            if answer.stream_fault and n == answer.fault_after:
                if answer.stream_fault == "error":
                    error = {"type": "overloaded_error", "message": "Overloaded"}
                    yield _sse("error", {"type": "error", "error": error})
                elif answer.stream_fault == "cut":
                    raise ConnectionAbortedError("the stream is cut here on purpose")
                return
            if name == "content_block_delta":
                self._sleep(self.stream_delay)
            yield _sse(name, {"type": name, **data})

    def _error(self, fault: Fault) -> tuple[int, dict[str, str], dict | bytes]:
        headers = self._headers()
        headers.update(fault.headers)
        if fault.raw_body is not None:
            return fault.status, headers, fault.raw_body.encode()
        payload = {
            "type": "error",
            "error": {"type": fault.error_type, "message": fault.message},
            "request_id": headers["request-id"],
        }
        return fault.status, headers, payload

    @staticmethod
    def _headers() -> dict[str, str]:
        return {"request-id": f"req_{uuid.uuid4().hex[:24]}"}

    def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._stopping.wait(seconds)


def _tokens(content: list[dict]) -> int:
    return len(json.dumps(content)) // 4


def _cut_at(content: list[dict], max_tokens: int) -> tuple[list[dict], bool]:
    """The content as the real API would end it at `max_tokens`: whole blocks while they fit,
    then the text that fits of a text block (a tool call that does not fit whole is left
    out); and whether it was cut."""
    if _tokens(content) <= max_tokens:
        return content, False
    kept: list[dict] = []
    for block in content:
        if _tokens([*kept, block]) <= max_tokens:
            kept.append(block)
            continue
        if block.get("type") == "text":
            room = max_tokens * 4 - len(json.dumps([*kept, {**block, "text": ""}]))
            if room > 0:
                kept.append({**block, "text": block["text"][:room]})
        break
    return kept, True


TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
MAX_CACHE_BREAKPOINTS = 4


def _prefix_blocks(body: dict) -> list[tuple[str, str]]:
    """The request as the cache sees it: each tool, system block and message block in that
    order, as JSON without its cache_control, and the time to live of the one it carries
    ("5m", "1h"; "" for none)."""
    out: list[tuple[str, str]] = []

    def add(kind: str, block: Any) -> None:
        marked = ""
        if isinstance(block, dict) and "cache_control" in block:
            control = block["cache_control"]
            marked = control.get("ttl", "5m") if isinstance(control, dict) else "5m"
            block = {k: v for k, v in block.items() if k != "cache_control"}
        out.append((f"{kind}:{json.dumps(block, sort_keys=True)}\n", marked))

    for tool in body.get("tools") or []:
        add("tool", tool)
    system = body.get("system")
    for block in [system] if isinstance(system, str) else system or []:
        add("system", block)
    for i, message in enumerate(body.get("messages") or []):
        content = message.get("content")
        for block in [content] if isinstance(content, str) else content or []:
            add(f"{i}:{message.get('role')}", block)
    return out


def _sse(name: str, data: dict) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def validate_messages_request(body: Any) -> str:
    """What the real API would answer 400 to, as its message; "" when acceptable."""
    if not isinstance(body, dict):
        return "request body must be a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: field required"
    if not isinstance(body.get("max_tokens"), int) or isinstance(body["max_tokens"], bool):
        return "max_tokens: Field required"
    if body["max_tokens"] < 1:
        return "max_tokens: Input should be greater than or equal to 1"
    for i, tool in enumerate(body.get("tools") or []):
        if not isinstance(tool, dict):
            return f"tools.{i}: Input should be a valid dictionary"
        if not isinstance(tool.get("name"), str) or not TOOL_NAME.match(tool["name"]):
            return f"tools.{i}.custom.name: String should match pattern '{TOOL_NAME.pattern}'"
        if not isinstance(tool.get("input_schema"), dict):
            return f"tools.{i}.custom.input_schema: Field required"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    if not isinstance(messages[0], dict) or messages[0].get("role") != "user":
        return "messages.0.role: the first message must use the user role"
    for i, message in enumerate(messages):
        # "system" messages inside the conversation: Claude Code's CLI (the Claude Agent
        # SDK's) sends its environment notes so; they take no part in tool pairing.
        if not isinstance(message, dict) or message.get("role") not in (
            "user",
            "assistant",
            "system",
        ):
            return f"messages.{i}: role must be user or assistant"
        content = message.get("content")
        if not isinstance(content, str | list):
            return f"messages.{i}.content: must be a string or a list of blocks"
        final_assistant = i == len(messages) - 1 and message["role"] == "assistant"
        if not content and not final_assistant:
            return (
                "messages: all messages must have non-empty content except for the optional "
                "final assistant message"
            )
        texts = (
            [content]
            if isinstance(content, str)
            else [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        )
        if isinstance(content, list) and any(not t for t in texts):
            return "messages: text content blocks must be non-empty"
        if (
            final_assistant
            and texts
            and isinstance(texts[-1], str)
            and texts[-1] != texts[-1].rstrip()
        ) and (isinstance(content, str) or content[-1].get("type") == "text"):
            return "messages: final assistant content cannot end with trailing whitespace"
    messages = [m for m in messages if m["role"] != "system"]
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            uses = _blocks(message, "tool_use")
            if any(not isinstance(b.get("input"), dict) for b in uses):
                return f"messages.{i}.content: tool_use.input: Input should be a valid dictionary"
            following = messages[i + 1] if i + 1 < len(messages) else {}
            answered = {b.get("tool_use_id") for b in _blocks(following, "tool_result", "user")}
            if (
                uses
                and answered
                and _blocks(following, "tool_result", "user")
                != (following["content"][: len(_blocks(following, "tool_result", "user"))])
            ):
                return (
                    f"messages.{i + 1}: Did not find {len(uses)} `tool_result` block(s) at the "
                    "beginning of this message. Messages following `tool_use` blocks must "
                    "begin with a matching number of `tool_result` blocks."
                )
            missing = [str(b.get("id")) for b in uses if b.get("id") not in answered]
            if missing:
                return (
                    f"messages.{i + 1}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(missing)}. Each `tool_use` block must have "
                    "a corresponding `tool_result` block in the next message."
                )
        else:
            previous = messages[i - 1] if i > 0 else {}
            offered = {b.get("id") for b in _blocks(previous, "tool_use", "assistant")}
            for b in _blocks(message, "tool_result"):
                if b.get("tool_use_id") not in offered:
                    return (
                        f"messages.{i}.content: unexpected `tool_use_id` found in `tool_result` "
                        f"blocks: {b.get('tool_use_id')}. Each `tool_result` block must have a "
                        "corresponding `tool_use` block in the previous message."
                    )
    ttls = [marked for _, marked in _prefix_blocks(body) if marked]
    if len(ttls) > MAX_CACHE_BREAKPOINTS:
        return (
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {len(ttls)}."
        )
    if any(t not in ("5m", "1h") for t in ttls):
        return "cache_control.ttl: Input should be '5m' or '1h'"
    if "1h" in ttls and "5m" in ttls[: len(ttls) - ttls[::-1].index("1h")]:
        return "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block"
    return ""


def _blocks(message: dict, kind: str, role: str | None = None) -> list[dict]:
    content = message.get("content")
    if (role and message.get("role") != role) or not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == kind]


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024  # a benchmark opens hundreds of connections at once
    fake: FakeMessagesServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like the real API
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes: with Nagle's algorithm the body then
        # waits for the client's delayed ACK, adding 40 ms to every call.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.fake._lock:
            self.server.fake._connections.add(self.connection)
            self.server.fake.connections_opened += 1

    def finish(self) -> None:
        with self.server.fake._lock:
            self.server.fake._connections.discard(self.connection)
        super().finish()

    def do_POST(self) -> None:
        self._answer("POST")

    def do_GET(self) -> None:
        self._answer("GET")

    def _answer(self, method: str) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        outcome = self.server.fake.handle(method, self.path, headers, raw)
        if outcome is None:
            self.close_connection = True
            return
        status, extra, payload = outcome
        if isinstance(payload, Iterator):
            self._stream(status, extra, payload)
            return
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        extra = {"content-type": "application/json", **extra}
        try:
            self.send_response(status)
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up (timeout) or the server is stopping
            self.close_connection = True

    def _stream(self, status: int, headers: dict[str, str], events: Iterator[bytes]) -> None:
        # Chunked, so the connection stays open for the next request, as the real API's does.
        try:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for event in events:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except ConnectionAbortedError:  # a fault: drop the connection mid-body
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:  # the client gave up or the server is stopping
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.fake.verbose:
            super().log_message(format, *args)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.fake_messages_api", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per reply")
    parser.add_argument(
        "--tool-turns",
        type=int,
        default=1,
        help="assistant turns that call an argument-free tool before the final answer",
    )
    parser.add_argument(
        "--stream-delay", type=float, default=0.02, help="seconds between streamed text pieces"
    )
    parser.add_argument("--api-key", default=None, help="accept only this key (default: any)")
    parser.add_argument("--quiet", action="store_true", help="do not log each request")
    args = parser.parse_args(argv)
    server = FakeMessagesServer(
        host=args.host,
        port=args.port,
        latency=args.latency,
        tool_turns=args.tool_turns,
        api_key=args.api_key,
        verbose=not args.quiet,
        stream_delay=args.stream_delay,
    )
    server.start()
    print(f"fake Messages API on {server.base_url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
