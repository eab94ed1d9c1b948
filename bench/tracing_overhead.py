"""What tracing costs the engine per step (agentkit/tracing.py), off and on.

    uv run python bench/tracing_overhead.py

Off (the default): the checks one engine step makes (its step span, a model call, a tool
call, two committed steps), each returning the shared no-op. On: the three spans such a step
records (agentops.step, chat, execute_tool) with the real SDK and a batch processor whose
exporter drops them, so what is measured is making the spans, not sending them. Queries'
spans (psycopg) and Celery's come on top when on. Microseconds of CPU per step, the best of
a few rounds; compare with the engine's milliseconds per step (bench/engine_throughput.py).
"""

import argparse
import os
import sys
import timeit
import uuid
from decimal import Decimal

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from agentkit import tracing
from agentkit.llm.base import LLMRequest, LLMResponse, Usage

REQUEST = LLMRequest(model="m", system="", messages=[], tools=[])
RESPONSE = LLMResponse(
    content=[], stop_reason="tool_use", usage=Usage(10, 5), model="m", cost_usd=Decimal(0)
)
RUN_ID = uuid.uuid4()


class Dropped(SpanExporter):
    def export(self, spans) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def one_step(traceparent: str) -> None:
    with tracing.step(traceparent, run_id=RUN_ID, agent="a", seq=3):
        with tracing.model_call("scripted", REQUEST) as span:
            tracing.model_answered(span, RESPONSE)
        with tracing.tool_call("t", call_id="x", side_effects=False) as span:
            tracing.tool_returned(span, error=None, attempts=1)
    tracing.enabled()  # events.py, once per committed step
    tracing.enabled()


def per_step(traceparent: str, n: int) -> float:
    best = min(timeit.repeat(lambda: one_step(traceparent), number=n, repeat=5)) / n
    empty = min(timeit.repeat(lambda: None, number=n, repeat=5)) / n
    return (best - empty) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20_000, help="steps per round")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    assert not tracing.enabled()
    print(f"off: {per_step('', args.steps):.2f} us per step")
    provider = TracerProvider(id_generator=tracing.id_generator())
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    tracing.configure(provider)
    traceparent = tracing.new_run_traceparent()
    print(f"on:  {per_step(traceparent, args.steps // 10):.1f} us per step (3 spans)")
    tracing.disable()
    provider.shutdown()


if __name__ == "__main__":
    main()
