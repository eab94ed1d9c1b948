"""Start-up of OpenTelemetry traces (settings.AGENTOPS_OTEL): the SDK's tracer provider with an
OTLP/HTTP exporter, the run spans of agentkit/tracing.py, and the instrumentation of Django
(requests, with an incoming `traceparent`), Celery (publish and run, the context carried in
the message headers from the request to the worker) and psycopg (queries).

Called by every process at start-up (agentops/apps.py); off, nothing here is imported beyond
this module and nothing is instrumented, so the hot path is as before.
"""

import logging
from typing import Any

from django.conf import settings

from agentkit import tracing

log = logging.getLogger("agentops.telemetry")

# Scraped and probed every few seconds: traces of them would drown the runs'.
EXCLUDED_URLS = "/metrics,/healthz"

_instrumentors: list[Any] = []
_provider: Any = None


def start(*, exporter: Any = None, set_global: bool = True) -> Any:
    """Trace this process; returns the tracer provider. `exporter` replaces the OTLP one
    (tests pass an InMemorySpanExporter, exported as each span ends)."""
    global _provider
    from opentelemetry import trace
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    if _provider is not None:
        return _provider
    provider = TracerProvider(
        resource=Resource.create({SERVICE_NAME: settings.OTEL_SERVICE_NAME}),
        id_generator=tracing.id_generator(),
    )
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        # Batched on a thread of its own: a span costs the engine an append to a queue.
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    else:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    if set_global:
        # The SDK's own spans (ANTHROPIC_OPEN_TELEMETRY) go to the same place.
        trace.set_tracer_provider(provider)
    for instrumentor, options in (
        (DjangoInstrumentor(), {"excluded_urls": EXCLUDED_URLS}),
        (CeleryInstrumentor(), {}),
        (PsycopgInstrumentor(), {}),
    ):
        instrumentor.instrument(tracer_provider=provider, **options)
        _instrumentors.append(instrumentor)
    tracing.configure(provider)
    _provider = provider
    log.info("OpenTelemetry traces on (service %s)", settings.OTEL_SERVICE_NAME)
    return provider


def stop() -> None:
    """Back to no tracing (tests): spans flushed, instrumentation removed."""
    global _provider
    tracing.disable()
    while _instrumentors:
        _instrumentors.pop().uninstrument()
    if _provider is not None:
        _provider.shutdown()
        _provider = None


def start_if_configured() -> None:
    if settings.AGENTOPS_OTEL:
        start()
