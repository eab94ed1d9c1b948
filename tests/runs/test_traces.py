"""A run's OpenTelemetry trace (agentkit/tracing.py): the run span, a span per engine step,
the model and tool calls under them with the GenAI semantic conventions, and the approval
wait recorded at decision time with the gate's start time. The real SDK, an in-memory
exporter."""

import pytest
from django.conf import settings
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from agentkit import tracing
from agentkit.agents import get_agent
from approvals import decisions
from approvals.models import Approval
from runs import engine
from runs.models import Run

pytestmark = pytest.mark.django_db(transaction=True)

SQL = {"question": "Revenue by category?", "report_to": "boss@example.com"}


def _launch(user) -> Run:
    agent = get_agent("sql-analyst")
    data, errors = agent.validate_input(SQL)
    assert not errors
    return engine.launch(agent=agent, input=data, launched_by=user, provider="scripted")


def _by_id(spans) -> dict:
    return {s.context.span_id: s for s in spans}


def test_a_gated_run_is_one_trace_of_steps_calls_and_the_wait(
    traces, operator, approver, no_enqueue
):
    tracer = trace.get_tracer("test", tracer_provider=_provider())
    with tracer.start_as_current_span("POST /runs/new") as request_span:
        run = _launch(operator)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    approval = Approval.objects.get(run=run)
    decisions.decide(approval.pk, user=approver, decision="approve")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    run.refresh_from_db()
    approval.refresh_from_db()

    spans = traces.get_finished_spans()
    run_context = tracing.parse(run.traceparent)
    # The run's trace is the launching request's, and every span of the run is in it
    # (queries made outside a step, a claim's, a decision's, are traces of their own).
    assert run_context.trace_id == request_span.get_span_context().trace_id
    assert {s.context.trace_id for s in spans if "db.system" not in s.attributes} == {
        run_context.trace_id
    }
    by_id = _by_id(spans)

    (run_span,) = [s for s in spans if s.name == "invoke_agent sql-analyst"]
    assert run_span.context.span_id == run_context.span_id
    assert run_span.parent.span_id == request_span.get_span_context().span_id
    assert run_span.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run_span.attributes["agentops.run.status"] == "succeeded"
    assert run_span.attributes["gen_ai.usage.output_tokens"] == run.tokens_out > 0
    assert run_span.start_time == _nanos(run.created_at)

    steps = [s for s in spans if s.name == "agentops.step"]
    assert steps and all(s.parent.span_id == run_span.context.span_id for s in steps)
    step_ids = {s.context.span_id for s in steps}

    chats = [s for s in spans if s.name.startswith("chat ")]
    assert len(chats) == run.step_count >= 3
    for chat in chats:
        assert chat.parent.span_id in step_ids
        assert chat.kind == SpanKind.CLIENT
        attributes = chat.attributes
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.provider.name"] == attributes["gen_ai.system"] == "scripted"
        assert chat.name == f"chat {attributes['gen_ai.request.model']}"
        assert attributes["gen_ai.usage.input_tokens"] > 0
        assert attributes["gen_ai.usage.output_tokens"] > 0
    assert sorted(c.attributes["gen_ai.response.finish_reasons"][0] for c in chats)[-1] in (
        "end_turn",
        "tool_use",
    )
    assert sum(c.attributes["gen_ai.usage.output_tokens"] for c in chats) == run.tokens_out

    tools = {
        s.attributes["gen_ai.tool.name"]: s for s in spans if s.name.startswith("execute_tool")
    }
    assert {"run_query", "email_report"} <= set(tools)
    for name, span in tools.items():
        assert span.name == f"execute_tool {name}"
        assert span.attributes["gen_ai.operation.name"] == "execute_tool"
        assert by_id[span.parent.span_id].name == "agentops.step"
        assert span.status.status_code != StatusCode.ERROR
    assert tools["email_report"].attributes["agentops.tool.side_effects"] is True

    (wait,) = [s for s in spans if s.name == "approval action"]
    assert wait.parent.span_id == run_span.context.span_id
    assert wait.attributes["agentops.approval.decision"] == "approved"
    assert wait.attributes["agentops.approval.decided_by"] == approver.username
    assert wait.attributes["gen_ai.tool.name"] == "email_report"
    assert wait.start_time == _nanos(approval.requested_at)
    assert wait.end_time == _nanos(approval.decided_at)
    # The gated call ran after the wait ended.
    assert tools["email_report"].start_time >= wait.end_time
    if settings.IS_POSTGRES:
        # psycopg's instrumentation: the step's writes are its children.
        queries = [s for s in spans if s.attributes.get("db.system") == "postgresql"]
        assert any(q.parent and q.parent.span_id in step_ids for q in queries)


def test_a_failed_tool_and_a_rejection_show_as_such(traces, operator, approver, no_enqueue):
    run = _launch(operator)
    engine.advance(run.pk, time_slice=30)
    approval = Approval.objects.get(run=run)
    decisions.decide(approval.pk, user=approver, decision="reject", reason="not to the boss")
    engine.advance(run.pk, time_slice=30)
    spans = traces.get_finished_spans()
    (wait,) = [s for s in spans if s.name == "approval action"]
    assert wait.attributes["agentops.approval.decision"] == "rejected"
    assert not [s for s in spans if s.name == "execute_tool email_report"]


def test_an_approval_withdrawn_by_a_cancel_ends_its_wait(traces, operator, no_enqueue):
    run = _launch(operator)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    assert run.cancel(by=operator, reason="wrong report")
    approval = Approval.objects.get(run=run)
    assert approval.status == Approval.Status.CANCELLED
    spans = traces.get_finished_spans()
    (run_span,) = [s for s in spans if s.name == "invoke_agent sql-analyst"]
    (wait,) = [s for s in spans if s.name == "approval action"]
    assert wait.parent.span_id == run_span.context.span_id
    assert wait.context.trace_id == tracing.parse(run.traceparent).trace_id
    assert wait.attributes["agentops.approval.decision"] == "cancelled"
    assert wait.attributes["agentops.approval.decided_by"] == operator.username
    assert wait.attributes["agentops.approval.ended_because"] == "run cancelled"
    assert wait.start_time == _nanos(approval.requested_at)
    assert wait.end_time == _nanos(approval.decided_at)


def test_off_a_run_has_no_trace_and_the_engine_makes_no_span(operator, no_enqueue):
    assert not tracing.enabled()
    run = _launch(operator)
    assert run.traceparent == ""
    assert tracing.step(run.traceparent, run_id="x", agent="a", seq=1) is tracing._OFF
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING


def _provider():
    from agentops import telemetry

    return telemetry._provider


def _nanos(moment) -> int:
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


@pytest.mark.parametrize(
    "stored",
    [
        "",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",  # no flags
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-fff",
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # the invalid trace id
        "00-0af7651916cd43dd8448eb211c80319z-b7ad6b7169203331-01",
    ],
)
def test_a_malformed_stored_context_is_no_context(stored):
    assert not tracing.parse(stored).is_valid
    assert tracing.trace_id_of(stored) == ""


def test_a_stored_context_is_the_run_spans_with_its_parent_after_it():
    stored = (
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01;"
        "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"
    )
    context = tracing.parse(stored)
    assert context.is_valid and context.is_remote
    assert f"{context.span_id:016x}" == "b7ad6b7169203331"
    assert tracing.trace_id_of(stored) == "0af7651916cd43dd8448eb211c80319c"
