"""The Anthropic Messages API through the official SDK.
Why and how: docs/design/modules.md."""

import asyncio
import email.utils
import functools
import json
import ssl
import threading
import time
from typing import Any

import anthropic
import httpx2
from django.conf import settings

from . import pricing
from .base import LLMError, LLMRequest, LLMResponse, LLMTransientError, OnText, Usage

# Statuses the SDK's own retry policy treats as transient; the engine retries them instead.
RETRYABLE_STATUSES = frozenset({408, 409, 429})


_per_thread = threading.local()


@functools.cache
def _tls() -> ssl.SSLContext:
    # Built once and shared: each client would otherwise load the CA bundle into an SSL
    # context of its own (~28 ms and ~0.8 MB each, times a worker's threads).
    return httpx2.create_ssl_context()


def _client(
    api_key: str, base_url: str, timeout: float, traces: bool = False
) -> anthropic.Anthropic:
    """This thread's client for this configuration.

    A client holds a connection pool that keeps a connection open between calls. One per
    worker thread (a thread makes one call at a time), not one shared by all of them: the
    pool looks at every connection it holds on each request and each response's close, so
    a shared pool of 200 connections made a call cost O(200) checks (bench/model_latency.py).
    """
    clients: dict[tuple[Any, ...], anthropic.Anthropic]
    clients = _per_thread.__dict__.setdefault("clients", {})
    key = (api_key, base_url, timeout, traces)
    if key not in clients:
        clients[key] = anthropic.Anthropic(
            api_key=api_key,
            base_url=base_url or None,  # None: the SDK's default (api.anthropic.com)
            timeout=timeout,
            # The engine retries with backoff and records every failed attempt as an
            # llm_error step (runs/engine/model.py); SDK retries on top of
            # that would be invisible in the timeline and multiply the wait.
            max_retries=0,
            http_client=anthropic.DefaultHttpxClient(verify=_tls()),
            # The SDK's OpenTelemetry spans are on by default and cost ~0.3 ms of CPU per call
            # even with no tracer provider to record them (bench/model_latency.py). With
            # `traces` (ANTHROPIC_OPEN_TELEMETRY) the SDK's default and its environment apply.
            open_telemetry=None if traces else False,
        )
    return clients[key]


_per_loop: dict[tuple[Any, ...], anthropic.AsyncAnthropic] = {}


def _async_client(
    api_key: str, base_url: str, timeout: float, traces: bool
) -> anthropic.AsyncAnthropic:
    """The running loop's client for this configuration, on the SDK's aiohttp transport: its
    connection pool finds a free connection in constant time, where httpx's looks at each
    connection it holds on every request and every response's close (O(calls in flight),
    most of a call's CPU with hundreds in flight: bench/model_latency.py)."""
    key = (id(asyncio.get_running_loop()), api_key, base_url, timeout, traces)
    if key not in _per_loop:
        connections = max(1, int(settings.AGENTOPS["MODEL_CALLS_IN_FLIGHT"]))
        _per_loop[key] = anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=base_url or None,
            timeout=timeout,
            max_retries=0,  # as the thread's client: the engine retries, step by step
            http_client=anthropic.DefaultAioHttpClient(
                verify=_tls(),
                limits=httpx2.Limits(
                    max_connections=connections, max_keepalive_connections=connections
                ),
            ),
            open_telemetry=None if traces else False,
        )
    return _per_loop[key]


class AnthropicProvider:
    name = "anthropic"

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str = "",
        timeout: float = 60.0,
        traces: bool = False,
        caching: bool = True,
    ):
        self.api_key, self.base_url, self.timeout = api_key, base_url, float(timeout)
        self.traces = traces
        self.caching = caching

    @property
    def client(self) -> anthropic.Anthropic | None:
        # Without a key the SDK would fall back to credentials found on the machine; a run
        # launched for Anthropic without a key fails its first call with a clear message.
        if not self.api_key:
            return None
        return _client(self.api_key, self.base_url, self.timeout, self.traces)

    @classmethod
    def from_settings(cls) -> "AnthropicProvider":
        return cls(
            api_key=settings.ANTHROPIC_API_KEY,
            base_url=settings.ANTHROPIC_BASE_URL,
            timeout=settings.AGENTOPS["LLM_TIMEOUT_SECONDS"],
            traces=settings.ANTHROPIC_OPEN_TELEMETRY,
            caching=settings.ANTHROPIC_PROMPT_CACHING,
        )

    def complete(self, request: LLMRequest, *, on_text: OnText | None = None) -> LLMResponse:
        client = self.client
        if client is None:
            raise LLMError("ANTHROPIC_API_KEY is not set")
        params = self._params(request)
        started = time.monotonic()
        if on_text is not None:
            return self._stream(client, params, on_text, started)
        try:
            # The body as JSON, not as the SDK's typed Message: the timeline stores plain dicts,
            # and building the typed models first was a sixth of the SDK's CPU per call
            # (bench/model_latency.py). Errors, timeouts and status codes are the SDK's as ever.
            raw = client.messages.with_raw_response.create(**params)
            message = json.loads(raw.http_response.content)
        except (anthropic.AnthropicError, ValueError) as exc:
            raise self._error(exc) from exc
        latency_ms = int((time.monotonic() - started) * 1000)
        return _response(message, raw.request_id or "", latency_ms)

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        """complete() on the running event loop (no streaming: drafts are published from a
        thread)."""
        if not self.api_key:
            raise LLMError("ANTHROPIC_API_KEY is not set")
        params = self._params(request)
        started = time.monotonic()
        try:
            client = _async_client(self.api_key, self.base_url, self.timeout, self.traces)
            raw = await client.messages.with_raw_response.create(**params)
            message = json.loads(raw.http_response.content)
        except (anthropic.AnthropicError, ValueError) as exc:
            raise self._error(exc) from exc
        latency_ms = int((time.monotonic() - started) * 1000)
        return _response(message, raw.request_id or "", latency_ms)

    def _error(self, exc: Exception) -> LLMError:
        """A failed plain call as one of the engine's two kinds."""
        if isinstance(exc, anthropic.APITimeoutError):
            return LLMTransientError(f"model call timed out after {self.timeout:g}s")
        if isinstance(exc, anthropic.APIConnectionError):
            return LLMTransientError(f"could not reach the model API: {exc}")
        if isinstance(exc, anthropic.APIStatusError):
            return _status_error(exc)
        if isinstance(exc, anthropic.AnthropicError):
            return LLMError(f"model call failed: {type(exc).__name__}: {exc}")
        # A 200 whose body is not JSON (a proxy's error page).
        return _malformed(f"body is not JSON ({exc})")

    def _params(self, request: LLMRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_tokens,
            "messages": api_messages(request.messages),
        }
        if request.system:
            params["system"] = request.system
        if request.tools:
            params["tools"] = request.tools
        if self.caching and not request.metadata.get("purpose"):
            # Not a summary's or a verifier's call: made once, a write would only cost more.
            params = cache_breakpoints(params, ttl=request.metadata.get("cache_ttl", "5m"))
        return params

    def _stream(
        self, client: anthropic.Anthropic, params: dict[str, Any], on_text: OnText, started: float
    ) -> LLMResponse:
        # The client's timeout bounds each read; the call as a whole keeps the same deadline
        # as a plain one, so a stream that trickles forever still ends.
        deadline = started + self.timeout
        try:
            raw = client.messages.with_raw_response.create(**params, stream=True)
            request_id = raw.request_id or ""
            with raw.parse() as events:
                message = _assemble(events, on_text, deadline)
        except _Late as exc:
            raise LLMTransientError(f"model call timed out after {self.timeout:g}s") from exc
        except anthropic.APITimeoutError as exc:
            raise LLMTransientError(f"model call timed out after {self.timeout:g}s") from exc
        except anthropic.APIConnectionError as exc:
            raise LLMTransientError(f"could not reach the model API: {exc}") from exc
        except anthropic.APIStatusError as exc:
            if exc.status_code == 200:  # an error event after the stream began
                raise _stream_error(exc) from exc
            raise _status_error(exc) from exc
        except anthropic.AnthropicError as exc:
            raise LLMError(f"model call failed: {type(exc).__name__}: {exc}") from exc
        # Mid-stream the SDK lets the transport's errors through unwrapped.
        except httpx2.TimeoutException as exc:
            raise LLMTransientError(f"model call timed out after {self.timeout:g}s") from exc
        except httpx2.HTTPError as exc:
            raise LLMTransientError(f"the model API's stream broke off: {exc}") from exc
        except (ValueError, TypeError, AttributeError, KeyError, IndexError) as exc:
            # An event that is not JSON or not the shape its type says.
            raise _malformed(f"stream event unreadable ({type(exc).__name__}: {exc})") from exc
        latency_ms = int((time.monotonic() - started) * 1000)
        return _response(message, request_id, latency_ms)


class _Late(Exception):
    """The stream went on past the call's deadline."""


# Error events that say the request itself is wrong; any other, mid-stream, is the server's.
_REQUEST_ERRORS = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "permission_error",
        "not_found_error",
        "request_too_large",
    }
)


def _stream_error(exc: anthropic.APIStatusError) -> LLMError:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error")
    if not isinstance(error, dict):
        error = {}
    kind = error.get("type") or "error"
    message = f"Anthropic API error mid-stream {kind}: {error.get('message') or exc.message}"
    if kind in _REQUEST_ERRORS:
        return LLMError(message, status=exc.status_code)
    return LLMTransientError(message, status=exc.status_code, overloaded=kind == "overloaded_error")


def _assemble(events: Any, on_text: OnText, deadline: float) -> dict[str, Any]:
    """The message the stream's events add up to, as the plain call's body would be.

    Text deltas go to `on_text` as they come; tool-call arguments arrive as pieces of JSON
    and are parsed once whole (kept as sent if they do not parse, as a plain call keeps an
    input that is not an object: the engine answers the model with the error).
    """
    message: dict[str, Any] | None = None
    blocks: list[dict[str, Any]] = []
    partial_json: dict[int, list[str]] = {}
    stopped = False
    for event in events:
        if time.monotonic() > deadline:
            raise _Late()
        kind = event.type
        if kind == "message_start":
            message = event.message.to_dict()
            message["content"] = blocks
            continue
        if message is None or stopped:
            raise _malformed(
                f"{kind} {'after message_stop' if stopped else 'before message_start'}"
            )
        if kind == "content_block_delta":
            delta, block = event.delta, blocks[event.index]
            if delta.type == "text_delta":
                block["text"] += delta.text
                if delta.text:
                    on_text(delta.text)
            elif delta.type == "input_json_delta":
                partial_json[event.index].append(delta.partial_json)
            elif delta.type == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta.thinking
            elif delta.type == "signature_delta":
                block["signature"] = block.get("signature", "") + delta.signature
            elif delta.type == "citations_delta":
                block.setdefault("citations", []).append(delta.citation.to_dict())
        elif kind == "content_block_start":
            if event.index != len(blocks):
                raise _malformed(f"content block {event.index} started out of order")
            block = event.content_block.to_dict()
            if block.get("type") in ("tool_use", "server_tool_use"):
                partial_json[event.index] = []
            blocks.append(block)
        elif kind == "content_block_stop":
            pieces = partial_json.pop(event.index, None)
            if pieces:
                joined = "".join(pieces)
                try:
                    blocks[event.index]["input"] = json.loads(joined)
                except ValueError:
                    blocks[event.index]["input"] = joined
        elif kind == "message_delta":
            message["stop_reason"] = event.delta.stop_reason
            message["stop_sequence"] = event.delta.stop_sequence
            # The counts here are the totals so far; the ones not given stay as started.
            usage = {k: v for k, v in event.usage.to_dict().items() if v is not None}
            message["usage"] = {**(message.get("usage") or {}), **usage}
        elif kind == "message_stop":
            stopped = True
    if message is None or not stopped:
        raise _malformed("the stream ended before message_stop")
    return message


def _response(message: Any, request_id: str, latency_ms: int) -> LLMResponse:
    # A proxy's page or a truncated body parses as something else, or not at all (above).
    if not isinstance(message, dict) or message.get("type", "message") != "message":
        raise _malformed(f"got {type(message).__name__} instead of a message")
    u, content, model = message.get("usage"), message.get("content"), message.get("model")
    if not (isinstance(u, dict) and isinstance(content, list) and isinstance(model, str) and model):
        raise _malformed("usage, content or model missing")
    for block in content:
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise _malformed("a content block without a type")
        if block["type"] == "tool_use" and not (
            isinstance(block.get("id"), str) and block["id"] and isinstance(block.get("name"), str)
        ):
            raise _malformed("a tool_use block without id or name")
        if block["type"] == "text" and not isinstance(block.get("text"), str):
            raise _malformed("a text block without text")
    counts = [
        u.get("input_tokens"),
        u.get("output_tokens"),
        u.get("cache_creation_input_tokens"),
        u.get("cache_read_input_tokens"),
    ]
    creation = u.get("cache_creation")
    counts.append(creation.get("ephemeral_1h_input_tokens") if isinstance(creation, dict) else 0)
    if not all(c is None or (type(c) is int and c >= 0) for c in counts):
        raise _malformed("token counts are not counts")
    usage = Usage(*(c or 0 for c in counts))
    return LLMResponse(
        content=[_block(b) for b in content],
        stop_reason=message.get("stop_reason") or "",
        usage=usage,
        model=model,
        cost_usd=pricing.cost(model, usage),
        latency_ms=latency_ms,
        request_id=request_id,
        message_id=str(message.get("id") or ""),
        extra={"message_id": message.get("id")},
    )


def _malformed(detail: str) -> LLMTransientError:
    # Not a valid response, so retrying is allowed (and bounded by the engine's caps).
    return LLMTransientError(f"the model API sent a malformed response: {detail}", status=200)


def _block(block: dict[str, Any]) -> dict[str, Any]:
    """A response content block as the timeline stores it and the next request sends back."""
    if block["type"] == "text":
        return {"type": "text", "text": block["text"]}
    if block["type"] == "tool_use":
        # The input is kept as the model sent it, valid or not: the engine validates it
        # against the tool's schema and answers the model with an error tool_result.
        return {
            "type": "tool_use",
            "id": block["id"],
            "name": block["name"],
            "input": block.get("input"),
        }
    # thinking (with its signature), redacted_thinking, server tool blocks, types newer than
    # this code...: as received, because the API wants them back unchanged.
    return block


def api_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as the API accepts it.

    A tool_use whose input was not an object (the model produced something unusable) is
    replayed with an empty object, because the API rejects the whole request otherwise;
    the timeline keeps what the model actually sent, and the tool_result says why it failed.
    """
    out = []
    for message in messages:
        content: Any = message.get("content")
        bad = isinstance(content, list) and any(_bad_tool_input(b) for b in content)
        if message.get("role") == "assistant" and bad:
            content = [{**b, "input": {}} if _bad_tool_input(b) else b for b in content]
            message = {**message, "content": content}
        out.append(message)
    return out


# The API takes at most 4 cache_control blocks in a request.
MAX_BREAKPOINTS = 4
CACHE_CONTROL = {
    "5m": {"type": "ephemeral"},  # the API's default time to live
    "1h": {"type": "ephemeral", "ttl": "1h"},
}


def cache_breakpoints(params: dict[str, Any], ttl: str = "5m") -> dict[str, Any]:
    """The request with cache_control on its stable prefix, which the API caches in the
    order tools, system, messages (each breakpoint caches everything before it too):

    - the last tool definition: the tools, which never change within a run;
    - the system prompt: it changes when the run's awaited operations do, and then the
      tools' entry still serves;
    - the user message before the model's last answer: where the previous call's last
      breakpoint was, so this call reads the older turns from the cache it wrote, whatever
      the API's lookback (20 blocks) would find;
    - the last message: written now, read by the next call.

    A prefix shorter than the model's minimum (1024 tokens for most) is simply not cached.
    Every breakpoint has the agent's `ttl` (the API wants a longer one never after a shorter).
    The caller's lists and dicts are left as they were (the engine keeps them)."""
    control = CACHE_CONTROL[ttl]
    out = dict(params)
    if out.get("tools"):
        out["tools"] = [*out["tools"][:-1], {**out["tools"][-1], "cache_control": control}]
    if out.get("system"):
        out["system"] = [{"type": "text", "text": out["system"], "cache_control": control}]
    messages = list(out["messages"])
    marks = [len(messages) - 1]
    if len(messages) >= 3 and messages[-3].get("role") == "user":
        marks.insert(0, len(messages) - 3)
    used = bool(out.get("tools")) + bool(out.get("system"))
    for i in marks[-(MAX_BREAKPOINTS - used) :]:
        messages[i] = _marked(messages[i], control)
    out["messages"] = messages
    return out


def _marked(message: dict[str, Any], control: dict[str, Any]) -> dict[str, Any]:
    """The message with cache_control on its last block (text content becomes a block)."""
    content = message["content"]
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if not content:
        return message  # a final assistant prefill may be empty; nothing to mark
    # thinking blocks cannot carry cache_control; a breakpoint on the block before serves.
    for j in range(len(content) - 1, -1, -1):
        if content[j].get("type") not in ("thinking", "redacted_thinking"):
            content = [*content[:j], {**content[j], "cache_control": control}, *content[j + 1 :]]
            break
    return {**message, "content": content}


def _bad_tool_input(block: dict[str, Any]) -> bool:
    return block.get("type") == "tool_use" and not isinstance(block.get("input"), dict)


def _status_error(exc: anthropic.APIStatusError) -> LLMError:
    status = exc.status_code
    headers = exc.response.headers
    kind = exc.type or "error"
    detail = exc.api_message or exc.message
    message = f"Anthropic API {status} {kind}: {detail}"
    if exc.request_id:
        message += f" (request {exc.request_id})"
    should_retry = headers.get("x-should-retry")
    if should_retry is not None:
        retryable = should_retry == "true"
    else:
        retryable = status in RETRYABLE_STATUSES or status >= 500
    if retryable:
        return LLMTransientError(
            message,
            status=status,
            retry_after=retry_after(headers),
            overloaded=kind == "overloaded_error",
        )
    return LLMError(message, status=status)


def retry_after(headers: Any) -> float | None:
    """Seconds the server asked us to wait: retry-after-ms, retry-after seconds or HTTP date."""
    value = headers.get("retry-after-ms")
    if value:
        try:
            return max(0.0, float(value) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    parsed = email.utils.parsedate_tz(value)
    if parsed is None:
        return None
    return max(0.0, email.utils.mktime_tz(parsed) - time.time())
