"""OpenTelemetry traces of runs: off unless a process calls configure() (agentops/telemetry.py
does when OTEL_EXPORTER_OTLP_ENDPOINT or AGENTOPS_OTEL is set); off, every helper costs one
check. Imports nothing of the project but agentkit.llm's plain types.
Why and how: docs/design/modules.md."""

import contextlib
import contextvars
import random
from collections.abc import Iterator, Mapping, MutableMapping
from datetime import UTC, datetime, timedelta
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import (
    INVALID_SPAN_CONTEXT,
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

from .llm.base import LLMRequest, LLMResponse

TRACER_NAME = "agentops"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_tracer: trace.Tracer | None = None
_OFF = contextlib.nullcontext()
# The ids the next span must have (a run span recorded at its end): read by _ReservedIds.
_reserved: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "agentops_reserved_span_ids", default=None
)


def enabled() -> bool:
    return _tracer is not None


def configure(provider: Any) -> None:
    """Trace with `provider` (an SDK TracerProvider made with id_generator=ReservedIds())."""
    global _tracer
    _tracer = provider.get_tracer(TRACER_NAME)


def disable() -> None:
    global _tracer
    _tracer = None


def id_generator() -> Any:
    """The SDK id generator that lets a span recorded after the fact keep the ids chosen for
    it when its run began. Imported here, not at the top: the SDK is needed only when on."""
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class ReservedIds(RandomIdGenerator):
        def generate_span_id(self) -> int:
            reserved = _reserved.get()
            return reserved[1] if reserved else super().generate_span_id()

        def generate_trace_id(self) -> int:
            reserved = _reserved.get()
            return reserved[0] if reserved else super().generate_trace_id()

    return ReservedIds()


# --- a run's context ----------------------------------------------------------------------
def new_run_traceparent(carrier: Mapping[str, str] | None = None) -> str:
    """The context of a new run, to keep on it: "<run span's traceparent>;<parent's>". The
    run span is a child of `carrier`'s traceparent (an external agent's request) or of the
    current span (the launching request, a parent run's step), else the root of a new trace
    (then the parent part is empty). "" when tracing is off."""
    if _tracer is None:
        return ""
    parent = _parent_context(carrier)
    span_id = random.getrandbits(64) or 1
    if not parent.is_valid:
        return _format(random.getrandbits(128) or 1, span_id, TraceFlags.SAMPLED)
    own = _format(parent.trace_id, span_id, parent.trace_flags)
    return f"{own};{_format(parent.trace_id, parent.span_id, parent.trace_flags)}"


def _parent_context(carrier: Mapping[str, str] | None) -> SpanContext:
    if carrier:
        extracted = trace.get_current_span(propagate.extract(carrier)).get_span_context()
        if extracted.is_valid:
            return extracted
    return trace.get_current_span().get_span_context()


def _format(trace_id: int, span_id: int, flags: int) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-{int(flags) & 0xFF:02x}"


def parse(traceparent: str) -> SpanContext:
    """A stored traceparent (its first part) as a remote span context; invalid if malformed."""
    own = (traceparent or "").partition(";")[0]
    parts = own.split("-")
    if len(parts) != 4 or [len(p) for p in parts[1:]] != [32, 16, 2]:
        return INVALID_SPAN_CONTEXT
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
    except ValueError:
        return INVALID_SPAN_CONTEXT
    if not trace_id or not span_id:
        return INVALID_SPAN_CONTEXT
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags))


def trace_id_of(traceparent: str) -> str:
    """The run's trace id (32 hex digits) as tracing back ends show it; "" if none."""
    context = parse(traceparent)
    return f"{context.trace_id:032x}" if context.is_valid else ""


def _under(traceparent: str) -> otel_context.Context | None:
    parent = parse(traceparent)
    if not parent.is_valid:
        return None
    return trace.set_span_in_context(NonRecordingSpan(parent))


def _links_to_current(traceparent: str, carrier: Mapping[str, str] | None = None) -> list[Link]:
    # The span that is current here (a Celery task's, a request's), or the caller's context
    # in `carrier`, when it belongs to another trace (a run resumed by a decision request, an
    # agent's call from a trace of its own): linked, so one leads to the other.
    current = _parent_context(carrier)
    if current.is_valid and current.trace_id != parse(traceparent).trace_id:
        return [Link(current)]
    return []


# --- spans while they happen --------------------------------------------------------------
def step(traceparent: str, *, run_id: Any, agent: str, seq: int) -> Any:
    """A context manager around one engine step of a run, the run span's child; yields the
    span (None when off)."""
    if _tracer is None or not traceparent:
        return _OFF  # before anything is built: this is the engine's hot path
    return in_run(
        "agentops.step",
        traceparent,
        {"agentops.run.id": str(run_id), "gen_ai.agent.name": agent, "agentops.step.seq": seq},
    )


def in_run(
    name: str,
    traceparent: str,
    attributes: dict[str, Any],
    *,
    carrier: Mapping[str, str] | None = None,
) -> Any:
    """A context manager around work done for a run, a child of the run's span wherever it
    runs, linked to the current context (or `carrier`'s) when that is another trace; yields
    the span (None when off, or the run was launched untraced)."""
    if _tracer is None or not traceparent:
        return _OFF
    return _span(
        name, _under(traceparent), attributes, links=_links_to_current(traceparent, carrier)
    )


def model_call(
    provider: str, request: LLMRequest, *, parent: otel_context.Context | None = None
) -> Any:
    """A context manager around one model call attempt (`chat <model>`), child of the
    current span (the step), or of `parent` (a call awaited on another thread's loop);
    yields the span (None when off)."""
    if _tracer is None:
        return _OFF
    return _span(
        f"chat {request.model}",
        parent,
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.system": provider,
            "gen_ai.request.model": request.model,
            "gen_ai.request.max_tokens": request.max_tokens,
        },
        kind=SpanKind.CLIENT,
    )


def current_context() -> otel_context.Context | None:
    """The current span's context, for work carried on in another thread (None when off)."""
    return None if _tracer is None else otel_context.get_current()


def current_trace_id() -> str:
    """The current span's trace id (32 hex digits) for a log line; "" when off or none."""
    if _tracer is None:
        return ""
    context = trace.get_current_span().get_span_context()
    return f"{context.trace_id:032x}" if context.is_valid else ""


@contextlib.contextmanager
def within(context: otel_context.Context | None) -> Iterator[None]:
    """Work on another thread as part of `context` (from current_context()): a pool's thread
    starts with an empty context, and the spans made there would each begin a trace."""
    if context is None:
        yield
        return
    token = otel_context.attach(context)
    try:
        yield
    finally:
        otel_context.detach(token)


def model_answered(span: Span | None, response: LLMResponse) -> None:
    if span is None:
        return
    span.set_attributes(
        {
            "gen_ai.response.model": response.model,
            # The answer's id (the Messages API's `msg_…`), not the HTTP request's.
            "gen_ai.response.id": response.message_id,
            "gen_ai.response.finish_reasons": [response.stop_reason or ""],
            # input_tokens counts the cached ones too, as the conventions ask; the two cache
            # counts say how much of it was read from the cache and written to it.
            "gen_ai.usage.input_tokens": response.usage.total_input_tokens,
            "gen_ai.usage.cache_read.input_tokens": response.usage.cache_read_input_tokens,
            "gen_ai.usage.cache_creation.input_tokens": (
                response.usage.cache_creation_input_tokens
            ),
            "gen_ai.usage.output_tokens": response.usage.output_tokens,
            "agentops.llm.request_id": response.request_id,
            "agentops.cost_usd": float(response.cost_usd),
        }
    )


def tool_call(tool: str, *, call_id: str = "", side_effects: bool = False) -> Any:
    """A context manager around one tool call with its retries (`execute_tool <tool>`);
    yields the span (None when off)."""
    if _tracer is None:
        return _OFF
    return _span(
        f"execute_tool {tool}",
        None,
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": call_id,
            "agentops.tool.side_effects": side_effects,
        },
    )


def tool_returned(span: Span | None, *, error: str | None, attempts: int) -> None:
    if span is None:
        return
    span.set_attribute("agentops.tool.attempts", attempts)
    if error:
        span.set_attribute("error.type", "tool_error")
        span.set_status(Status(StatusCode.ERROR, error[:200]))


def failed(span: Span | None, error_type: str, message: str) -> None:
    if span is not None:
        span.set_attribute("error.type", error_type)
        span.set_status(Status(StatusCode.ERROR, message[:200]))


@contextlib.contextmanager
def _span(
    name: str,
    parent: otel_context.Context | None,
    attributes: dict[str, Any],
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    links: list[Link] | None = None,
) -> Iterator[Span]:
    assert _tracer is not None
    span = _tracer.start_span(name, context=parent, kind=kind, attributes=attributes, links=links)
    with trace.use_span(span, end_on_exit=True, record_exception=True):
        yield span


# --- spans recorded after the fact --------------------------------------------------------
def record(
    name: str,
    traceparent: str,
    *,
    start: datetime,
    end: datetime,
    attributes: dict[str, Any],
    error: str = "",
) -> None:
    """A span of the run `traceparent` that began at `start` in another process (an approval
    wait, from its gate to its decision), recorded now."""
    if _tracer is None or not traceparent:
        return
    span = _tracer.start_span(
        name,
        context=_under(traceparent),
        attributes=attributes,
        start_time=_nanos(start),
        links=_links_to_current(traceparent),
    )
    if error:
        span.set_status(Status(StatusCode.ERROR, error[:200]))
    span.end(end_time=_nanos(end))


def record_run(
    traceparent: str,
    *,
    agent: str,
    start: datetime,
    end: datetime,
    attributes: dict[str, Any],
    error: str,
) -> None:
    """The run's own span (`invoke_agent <agent>`), recorded when it ends, with the ids its
    children have been pointing at since it began."""
    if _tracer is None:
        return
    own = parse(traceparent)
    if not own.is_valid:
        return
    parent = parse(traceparent.partition(";")[2])
    context = trace.set_span_in_context(NonRecordingSpan(parent)) if parent.is_valid else None
    token = _reserved.set((own.trace_id, own.span_id))
    try:
        span = _tracer.start_span(
            f"invoke_agent {agent}",
            # A root span keeps the trace id only through the reserved ids; an empty
            # context makes it a root even inside another span.
            context=context or otel_context.Context(),
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": agent,
                **attributes,
            },
            start_time=_nanos(start),
        )
    finally:
        _reserved.reset(token)
    if error:
        span.set_status(Status(StatusCode.ERROR, error[:200]))
    span.end(end_time=_nanos(end))


def _nanos(moment: datetime) -> int:
    # Exact: a float of nanoseconds since 1970 is off by hundreds of them.
    return (moment - _EPOCH) // timedelta(microseconds=1) * 1000


# --- across processes ----------------------------------------------------------------------
def inject(headers: MutableMapping[str, str]) -> None:
    """Add the current span's W3C `traceparent` (and `tracestate`) to outgoing headers."""
    if _tracer is not None:
        propagate.inject(headers)
