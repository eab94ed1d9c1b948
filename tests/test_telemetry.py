"""Traces across processes (agentops/telemetry.py): a launch request's context reaches the
worker through the Celery message (W3C traceparent in its headers), and the run joins the
caller's trace. A real Celery worker (the embedded one, on the test's broker), the real SDK
and instrumentation, an in-memory exporter."""

import json
import time

import pytest
from celery._state import _set_task_join_will_block
from celery.worker import state
from django.test import Client
from opentelemetry.trace import SpanKind

from accounts.models import ApiToken
from agentkit import tracing
from agentops import embedded, telemetry
from runs.models import Run

pytestmark = pytest.mark.django_db(transaction=True)

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{CALLER_TRACE}-00f067aa0ba902b7-01"
SQL = {"question": "Revenue by category?", "report_to": "boss@example.com"}


@pytest.fixture
def worker():
    from agentops.celery import app

    # The memory broker's queue lives as long as this process: messages earlier tests
    # published and nobody consumed would come first, and the run's wait out its minute.
    app.control.purge()
    worker, thread = embedded.start_worker(concurrency=2)
    yield worker
    state.should_stop = 0  # the worker's own warm shutdown, from its loop's thread
    thread.join(10)
    state.should_stop = None
    assert not thread.is_alive()
    # A worker started in this process tells Celery that joining a result would block (a
    # global flag): undone, as celery.contrib.testing's worker does, or a later test's
    # `.apply().get()` in this process raises "Never call result.get() within a task!".
    _set_task_join_will_block(False)


def _wait_for(run_id, status: str, seconds: float = 60) -> Run:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        run = Run.objects.get(pk=run_id)
        if run.status == status:
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} is {run.status}, not {status}")


def test_a_launch_request_context_reaches_the_worker_through_celery(traces, operator, worker):
    _, token = ApiToken.issue(operator, "tests")
    client = Client(headers={"Authorization": f"Bearer {token}", "traceparent": TRACEPARENT})
    response = client.post(
        "/api/runs", json.dumps({"agent": "sql-analyst", "input": SQL}), "application/json"
    )
    assert response.status_code == 201, response.content
    run = _wait_for(response.json()["id"], Run.Status.WAITING)
    time.sleep(0.5)  # the task's own span ends after the run's last write

    spans = traces.get_finished_spans()
    # The caller's trace: the request, the run, the task published and the task run.
    assert tracing.trace_id_of(run.traceparent) == CALLER_TRACE
    (request,) = [s for s in spans if s.kind == SpanKind.SERVER]
    assert f"{request.context.trace_id:032x}" == CALLER_TRACE
    assert request.attributes["http.route"].endswith("runs")
    published = [s for s in spans if s.name == "apply_async/runs.tasks.advance_run"]
    ran = [s for s in spans if s.name == "run/runs.tasks.advance_run"]
    assert published and ran
    assert published[0].context.trace_id == request.context.trace_id
    # Carried by the message: the worker's span is the publisher's child.
    assert ran[0].parent.span_id == published[0].context.span_id
    assert ran[0].context.trace_id == request.context.trace_id
    # The run's span, recorded at its end, will be the request's child.
    assert tracing.parse(run.traceparent.partition(";")[2]).span_id == request.context.span_id
    steps = [s for s in spans if s.name == "agentops.step"]
    assert steps and all(s.parent.span_id == tracing.parse(run.traceparent).span_id for s in steps)


def test_off_nothing_is_instrumented(settings):
    settings.AGENTOPS_OTEL = False
    telemetry.start_if_configured()
    assert not tracing.enabled()
    assert telemetry._provider is None
    assert not any("opentelemetry" in m for m in settings.MIDDLEWARE)
