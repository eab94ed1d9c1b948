"""Replay: a recorded run re-run with its recorded model turns, tool results and decisions,
with no model call, no tool call and nothing written that stays."""

import dataclasses

import pydantic
import pytest

from agentkit.tools import REGISTRY
from approvals import decisions
from approvals.models import Approval
from demo.models import Refund
from history.replay import replay
from runs import engine
from runs.models import Run, SideEffect, Step
from tests.demo.test_demo_flows import launch_default

pytestmark = pytest.mark.django_db


def approved_refund(operator, approver) -> Run:
    """The demo's gated refund, approved twice (the refund, then the e-mail)."""
    run = launch_default("refund-desk", operator)
    for _ in range(2):
        assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
        approval = Approval.objects.get(run=run, status=Approval.Status.PENDING)
        decisions.decide(approval.pk, user=approver, decision="approve")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    return run


def test_a_gated_run_replays_identically_with_no_side_effect(
    operator, approver, no_enqueue, monkeypatch, django_capture_on_commit_callbacks
):
    run = approved_refund(operator, approver)
    before = {
        "runs": Run.objects.count(),
        "steps": Step.objects.count(),
        "ledger": list(SideEffect.objects.values_list("key", "status")),
        "refunds": Refund.objects.count(),
        "approvals": Approval.objects.count(),
    }
    called = []
    for name in ("lookup_order", "issue_refund", "send_customer_email"):
        tool = REGISTRY[name]
        monkeypatch.setitem(
            REGISTRY, name, dataclasses.replace(tool, fn=lambda *a, **k: called.append(a))
        )

    with django_capture_on_commit_callbacks() as on_commit:
        result = replay(run)

    run.refresh_from_db()
    assert result.identical, result.summary
    assert result.compared == run.last_seq == result.recorded_steps
    assert called == []
    after = {
        "runs": Run.objects.count(),
        "steps": Step.objects.count(),
        "ledger": list(SideEffect.objects.values_list("key", "status")),
        "refunds": Refund.objects.count(),
        "approvals": Approval.objects.count(),
    }
    assert after == before
    # Nothing waits for a commit: no live event, no queue message, no notification.
    assert on_commit == []


def drive_to_the_end(run: Run, approver, index: int) -> Run:
    """Advance, deciding whatever waits (approve, or reject every third; answer questions
    with their first option), until the run finishes."""
    for _ in range(20):
        status = engine.advance(run.pk, time_slice=30)
        if status != Run.Status.WAITING:
            break
        for approval in Approval.objects.filter(run=run, status=Approval.Status.PENDING):
            if approval.kind == Approval.Kind.QUESTION:
                answer = approval.options[0] if approval.options else "yes"
                decisions.decide(approval.pk, user=approver, decision="answer", answer=answer)
            elif index % 3 == 2:
                decisions.decide(approval.pk, user=approver, decision="reject", reason="no")
            else:
                decisions.decide(approval.pk, user=approver, decision="approve")
    run.refresh_from_db()
    assert run.is_terminal, run.status
    return run


def demo_inputs(index: int) -> tuple[str, dict]:
    customers = ["grace.thompson1@example.com", "nobody@example.com"]
    return [
        ("sql-analyst", {"question": f"Top {index} customers?", "report_to": "a@example.com"}),
        ("refund-desk", {"order_id": 1 + index % 20, "amount": "", "reason": "damaged"}),
        ("refund-desk", {"order_id": 13, "amount": f"{10 + index}.00", "reason": "late"}),
        ("order-inquiry", {"customer_email": customers[index % 2], "message": "Where is it?"}),
    ][index % 4]


def test_fifty_recorded_demo_runs_replay_the_same_with_no_side_effect(
    operator, approver, no_enqueue
):
    from agentkit.agents import get_agent

    runs = []
    for index in range(50):
        slug, data = demo_inputs(index)
        agent = get_agent(slug)
        cleaned, errors = agent.validate_input(data)
        assert not errors, errors
        run = engine.launch(agent=agent, input=cleaned, launched_by=operator, provider="scripted")
        runs.append(drive_to_the_end(run, approver, index))
    statuses = {r.status for r in runs}
    assert Run.Status.SUCCEEDED in statuses
    assert Step.objects.filter(kind=Step.Kind.DECISION).exists()
    counts = (
        Run.objects.count(),
        Step.objects.count(),
        SideEffect.objects.count(),
        Refund.objects.count(),
        Approval.objects.count(),
    )

    results = [replay(run) for run in runs]

    diverged = [(r.run_id, r.summary) for r in results if not r.identical]
    assert not diverged
    assert [r.compared for r in results] == [r.last_seq for r in runs]
    assert counts == (
        Run.objects.count(),
        Step.objects.count(),
        SideEffect.objects.count(),
        Refund.objects.count(),
        Approval.objects.count(),
    )


def test_a_changed_tool_schema_stops_the_replay_where_it_diverges(
    operator, approver, no_enqueue, monkeypatch
):
    run = approved_refund(operator, approver)
    # Since the run, send_customer_email has gained a required argument.
    email = REGISTRY["send_customer_email"]
    stricter = pydantic.create_model(
        "StricterEmail", __base__=email.args_model, template=(str, ...)
    )
    monkeypatch.setitem(
        REGISTRY, "send_customer_email", dataclasses.replace(email, args_model=stricter)
    )

    result = replay(run)

    assert not result.identical
    sent = run.steps.get(kind=Step.Kind.GATE, data__tool="send_customer_email").seq
    # The call is no longer valid, so it is never gated: the replay parts at that gate.
    assert result.divergence.seq == sent
    assert result.divergence.recorded.startswith("gate action send_customer_email")
    assert (
        "the tool send_customer_email's input schema changed since the run: now requires template"
        in result.divergence.why
    )
    assert result.compared == sent - 1


def test_a_run_of_an_agent_no_longer_in_the_catalogue_cannot_be_replayed(operator, no_enqueue):
    run = launch_default("sql-analyst", operator)
    Run.objects.filter(pk=run.pk).update(agent="retired-agent")
    run.refresh_from_db()
    result = replay(run)
    assert not result.identical
    assert result.divergence.seq == 1
    assert "retired-agent" in result.divergence.why


def test_a_forked_run_replays_from_where_it_started(refunded, operator, approver):
    from history.fork import fork

    after_lookup = refunded.steps.get(kind=Step.Kind.TOOL, data__tool="lookup_order").seq
    child = fork(refunded, after_lookup, instruction="Go on.", by=operator)
    child = drive_to_the_end(child, approver, 0)
    assert child.status == Run.Status.SUCCEEDED

    result = replay(child)

    assert result.identical, result.summary
    assert result.compared == child.last_seq


def test_a_run_that_launched_a_follow_up_replays_the_same(operator, no_enqueue):
    from agentkit.agents import get_agent
    from runs import chains

    agent = get_agent("complaint-triage")
    data = {name: f.initial for name, f in agent.input_form.base_fields.items()}
    cleaned, errors = agent.validate_input({k: v for k, v in data.items() if v is not None})
    assert not errors, errors
    run = engine.launch(agent=agent, input=cleaned, launched_by=operator, provider="scripted")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    chains.launch_follow_ups(str(run.pk))
    run.refresh_from_db()
    assert run.steps.filter(data__event=chains.FOLLOW_UP).exists()

    result = replay(run)

    assert result.identical, result.summary
    assert result.compared == run.last_seq - 1  # all but the follow-up step
