"""An approval webhook is a span of its run's trace, and carries that span's W3C
traceparent: the receiver's handling of the request joins the run's trace."""

import pytest

from agentkit import tracing

from .test_notify import configure, endpoint, gate_a_run  # noqa: F401 (endpoint: a fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_approval_webhook_carries_the_runs_trace(
    settings,
    traces,
    endpoint,  # noqa: F811
    eager,
    operator,
    no_enqueue,
):
    hook = endpoint()
    configure(settings, hook.url)
    run, _ = gate_a_run(operator)

    (request,) = hook.requests
    sent = tracing.parse(request["headers"]["traceparent"])
    (delivery,) = [s for s in traces.get_finished_spans() if s.name == "agentops.webhook"]
    assert sent.trace_id == delivery.context.trace_id == tracing.parse(run.traceparent).trace_id
    assert sent.span_id == delivery.context.span_id
    assert delivery.parent.span_id == tracing.parse(run.traceparent).span_id
    assert delivery.attributes["url.full"] == hook.url


def test_without_tracing_a_webhook_has_no_traceparent(
    settings,
    endpoint,  # noqa: F811
    eager,
    operator,
    no_enqueue,
):
    hook = endpoint()
    configure(settings, hook.url)
    gate_a_run(operator)
    assert "traceparent" not in hook.requests[0]["headers"]
