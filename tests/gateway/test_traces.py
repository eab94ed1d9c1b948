"""An external agent's trace (agentkit/tracing.py): a session registered with a W3C
`traceparent` is a run in the agent's trace; its calls, the approval wait, the result it
reports and the callback it gets are spans of that trace, and the callback carries a
traceparent for the agent to go on with."""

import pytest
from django.test import Client

from agentkit import tracing
from approvals import decisions
from approvals.models import Approval
from runs.models import Run, args_hash

from .conftest import AgentClient, make_agent
from .test_callbacks import _serve

AGENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
AGENT_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{AGENT_TRACE}-{AGENT_SPAN}-01"


@pytest.fixture
def receiver(settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "CALLBACK_ALLOWED_NETWORKS": ["127.0.0.1/32"]}
    base, got, server = _serve()
    yield f"{base}/decided", got
    server.shutdown()


def _traced_bot(token: str) -> AgentClient:
    bot = AgentClient(token)
    bot.http = Client(HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_TRACEPARENT=TRACEPARENT)
    return bot


def test_a_session_with_a_traceparent_is_traced_in_the_agents_trace(
    db, traces, eager, receiver, approver, django_capture_on_commit_callbacks
):
    url, got = receiver
    _, token = make_agent()
    bot = _traced_bot(token)
    session = bot.session(session="s-1")
    run = Run.objects.get(pk=session)
    assert tracing.trace_id_of(run.traceparent) == AGENT_TRACE
    run_span_id = tracing.parse(run.traceparent).span_id

    body = bot.call(session, "delete_branch", {"name": "dev"}, callback_url=url).json()
    approval = Approval.objects.get(pk=body["approval"])
    with django_capture_on_commit_callbacks(execute=True):
        decisions.decide(
            approval.pk,
            user=approver,
            decision="approve",
            shown_args_hash=args_hash(approval.tool, approval.args),
        )
    with django_capture_on_commit_callbacks(execute=True):
        reported = bot.post(f"/calls/{body['call']}/result", {"result": "ok", "duration_ms": 40})
        assert reported.status_code == 200, reported.content
        closed = bot.post(f"/sessions/{session}/close", {"status": "succeeded"})
        assert closed.status_code == 200, closed.content

    spans = {s.name: s for s in traces.get_finished_spans()}
    in_agents_trace = [
        "invoke_agent ci-bot",
        "agentops.gateway.call",
        "approval action",
        "execute_tool delete_branch",
        "agentops.callback",
    ]
    for name in in_agents_trace:
        assert f"{spans[name].context.trace_id:032x}" == AGENT_TRACE, name
    assert spans["invoke_agent ci-bot"].context.span_id == run_span_id
    assert f"{spans['invoke_agent ci-bot'].parent.span_id:016x}" == AGENT_SPAN
    for name in in_agents_trace[1:]:
        assert spans[name].parent.span_id == run_span_id, name
    assert spans["agentops.gateway.call"].attributes["gen_ai.tool.name"] == "delete_branch"
    assert spans["approval action"].attributes["agentops.approval.decision"] == "approved"
    tool = spans["execute_tool delete_branch"]
    assert tool.end_time - tool.start_time == 40_000_000  # the duration the agent reported

    # The callback's traceparent: the delivery span, in the agent's trace.
    ((headers, _),) = got
    sent = tracing.parse({k.lower(): v for k, v in headers.items()}["traceparent"])
    assert sent.trace_id == spans["agentops.callback"].context.trace_id
    assert sent.span_id == spans["agentops.callback"].context.span_id


def test_without_tracing_no_traceparent_is_sent(
    db, eager, receiver, approver, django_capture_on_commit_callbacks
):
    url, got = receiver
    _, token = make_agent()
    bot = _traced_bot(token)
    session = bot.session()
    assert Run.objects.get(pk=session).traceparent == ""
    body = bot.call(session, "delete_branch", {"name": "dev"}, callback_url=url).json()
    approval = Approval.objects.get(pk=body["approval"])
    with django_capture_on_commit_callbacks(execute=True):
        decisions.decide(
            approval.pk,
            user=approver,
            decision="reject",
            reason="no",
            shown_args_hash=args_hash(approval.tool, approval.args),
        )
    assert len(got) == 1
    assert "traceparent" not in {k.lower() for k in got[0][0]}


def test_approvals_withdrawn_by_the_agent_or_a_failed_close_end_their_waits(
    db, traces, eager, django_capture_on_commit_callbacks
):
    _, token = make_agent()
    bot = _traced_bot(token)
    session = bot.session(session="s-2")
    run_span_id = tracing.parse(Run.objects.get(pk=session).traceparent).span_id
    first = bot.call(session, "delete_branch", {"name": "dev"}).json()
    second = bot.call(session, "delete_branch", {"name": "main"}).json()
    with django_capture_on_commit_callbacks(execute=True):
        withdrawn = bot.post(f"/calls/{first['call']}/withdraw", {"reason": "timed out"})
        assert withdrawn.status_code == 200, withdrawn.content
        closed = bot.post(f"/sessions/{session}/close", {"status": "failed", "detail": "crashed"})
        assert closed.status_code == 200, closed.content

    waits = {
        s.attributes["agentops.approval.id"]: s
        for s in traces.get_finished_spans()
        if s.name == "approval action"
    }
    assert set(waits) == {first["approval"], second["approval"]}
    for span in waits.values():
        assert span.parent.span_id == run_span_id
        assert f"{span.context.trace_id:032x}" == AGENT_TRACE
        assert span.attributes["agentops.approval.decision"] == "cancelled"
    assert waits[first["approval"]].attributes["agentops.approval.ended_because"] == (
        "withdrawn by the agent: timed out"
    )
    assert waits[second["approval"]].attributes["agentops.approval.ended_because"] == (
        "session ended: crashed"
    )
