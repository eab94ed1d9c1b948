"""Pending operations in the engine: opened by a tool, shown to the model, waited for without
a worker, finished by a callback, an operator, a poll or the deadline (runs/pending/models.py)."""

import dataclasses
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agentkit.llm.scripted import text, tool_use
from runs import engine
from runs.engine.awaiting import open_operation
from runs.models import PendingOperation, Run, Step
from runs.pending import models as pending

from .. import harness

pytestmark = pytest.mark.django_db

Status = PendingOperation.Status


def events(run: Run) -> list[tuple[str, str]]:
    return [
        (kind, data.get("event") or data.get("tool") or "")
        for kind, data in run.steps.order_by("seq").values_list("kind", "data")
    ]


def waiting_run(launch, script, *turns_after):
    """A run that started job "a" and waits for it."""
    provider = script(
        [
            [text("Starting."), tool_use("t_start", job="a")],
            [text("Waiting for job a.")],
            *turns_after,
        ]
    )
    run = launch()
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    return run, provider, PendingOperation.objects.get(run=run)


def test_the_model_is_told_what_it_awaits_and_the_outcome_once_it_arrives(launch, script):
    run, provider, op = waiting_run(launch, script, [text("Job a is done.")])
    # The turn after the start already lists the open operation in the system prompt.
    assert f"#{op.pk} t_start: awaits job a" in provider.requests[1].system
    assert "do not start them again" in provider.requests[1].system
    run.refresh_from_db()
    assert run.lease_owner == "" and run.status_detail == "waiting for 1 operation(s)"

    pending.finish(op.pk, Status.COMPLETED, result={"rows": 7}, by="callback")
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    last = provider.requests[-1]
    told = last.messages[-1]["content"][-1]["text"]
    assert told == f'Operation #{op.pk} (t_start: awaits job a) completed: {{"rows":7}}'
    assert "Operations you started" not in last.system  # nothing open any more
    # Paused, told (with the resume, in one write), resumed; then the answer and the end.
    assert events(run)[-5:] == [
        (Step.Kind.STATUS, "paused"),
        (Step.Kind.PENDING, "completed"),
        (Step.Kind.STATUS, "resumed"),
        (Step.Kind.LLM, ""),
        (Step.Kind.STATUS, "terminated"),
    ]
    assert harness.CALLS["t_start"] == 1


def test_the_same_call_is_refused_while_its_operation_is_open(launch, script):
    provider = script(
        [
            [tool_use("t_start", job="a")],
            [tool_use("t_start", job="a")],  # the "47 e-mails" mistake
            [tool_use("t_start", job="b")],  # another job is fine
            [text("Waiting.")],
        ]
    )
    run = launch()
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    assert harness.CALLS["t_start"] == 2
    assert PendingOperation.objects.filter(run=run).count() == 2
    refused = run.steps.filter(kind=Step.Kind.TOOL, data__is_error=True).get()
    assert refused.data["error"].startswith("not started again: operation #")
    assert "job a" in provider.requests[-1].system and "job b" in provider.requests[-1].system


def test_an_outcome_arriving_while_the_run_works_is_reported_before_its_next_model_call(
    launch, script
):
    ops = []

    def finish_during_second_turn(request):
        if len(ops) == 0 and PendingOperation.objects.exists():
            op = PendingOperation.objects.get()
            ops.append(pending.finish(op.pk, Status.COMPLETED, result="ok", by="callback"))

    provider = script(
        [
            [tool_use("t_start", job="a")],
            [tool_use("t_echo", text="meanwhile")],
            [text("All done.")],
        ],
        on_call=finish_during_second_turn,
    )
    run = launch()
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    (op,) = ops
    op.refresh_from_db()
    # Reported by the worker (the run was running): once, before the third model call.
    report = run.steps.get(kind=Step.Kind.PENDING)
    assert op.reported_seq == report.seq
    third_llm = run.steps.filter(kind=Step.Kind.LLM).order_by("seq")[2]
    assert report.seq < third_llm.seq
    assert "completed: ok" in provider.requests[2].messages[-1]["content"][-1]["text"]
    assert not run.steps.filter(kind=Step.Kind.STATUS, data__event="paused").exists()


def test_a_poll_completes_the_operation_and_resumes_the_run(launch, script):
    harness.EXPORT_POLLS["orders"] = 1
    provider = script(
        [[tool_use("t_export", table="orders")], [text("Waiting.")], [text("Exported.")]]
    )
    run = launch()
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    op = PendingOperation.objects.get(run=run)
    assert pending.sweep(now=timezone.now()) == 0  # not due yet: nothing polled
    assert harness.CALLS["t_export_status"] == 0
    assert pending.sweep(now=op.next_poll_at) == 0  # polled: not ready yet
    op.refresh_from_db()
    assert op.status == Status.OPEN and harness.CALLS["t_export_status"] == 1
    assert pending.sweep(now=op.next_poll_at) == 1  # ready
    op.refresh_from_db()
    assert op.status == Status.COMPLETED and op.finished_by == "poll t_export_status"
    assert op.result == {"file": "orders.csv", "rows": 42}
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    assert "orders.csv" in provider.requests[-1].messages[-1]["content"][-1]["text"]


def test_past_the_deadline_a_person_decides_when_the_agent_says_so(launch, script, operator):
    provider = script(
        [[tool_use("t_start", job="a", escalate=True)], [text("Waiting.")], [text("Given up.")]]
    )
    run = launch()
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    op = PendingOperation.objects.get(run=run)
    assert pending.sweep(now=op.deadline + timedelta(seconds=1)) == 1
    op.refresh_from_db()
    run.refresh_from_db()
    assert op.status == Status.ESCALATED and run.status == Run.Status.WAITING
    assert run.steps.filter(kind=Step.Kind.PENDING, data__event="escalated").exists()
    # Escalated, the sweep leaves it to the person.
    assert pending.sweep(now=op.deadline + timedelta(hours=1)) == 0
    pending.finish(op.pk, Status.FAILED, error="supplier gone", by="operator olivia")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    told = provider.requests[-1].messages[-1]["content"][-1]["text"]
    assert told.endswith("failed: supplier gone")


def test_a_callback_for_a_run_that_ended_changes_nothing_in_it(launch, script):
    run, _, op = waiting_run(launch, script)
    run.refresh_from_db()
    run.cancel()
    last_seq = Run.objects.get(pk=run.pk).last_seq
    with pytest.raises(pending.AlreadyFinished):
        pending.finish(op.pk, Status.COMPLETED, result=1, by="callback")
    assert Run.objects.get(pk=run.pk).last_seq == last_seq


def test_the_sweep_closes_operations_of_runs_that_ended_otherwise(launch, script):
    run, _, op = waiting_run(launch, script)
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.FAILED, termination_reason=Run.Termination.MAX_SECONDS
    )
    assert pending.sweep() == 1
    op.refresh_from_db()
    assert op.status == Status.CANCELLED and op.finished_by == "run ended"


def test_a_resumed_call_reuses_its_operation(launch, script):
    """A worker that dies after the tool returned and before its step: the call runs again
    under the same key and finds its operation instead of opening a second one."""
    run, _, op = waiting_run(launch, script)
    work = type("W", (), {"run": run, "state": {"awaiting": []}, "agent_config": {}})()
    again = open_operation(work, harness.REGISTRY["t_start"], {"job": "a"}, op.key, _pending())
    assert again["operation"] == op.pk
    assert PendingOperation.objects.count() == 1


def _pending():
    from agentkit.tools import Pending

    return Pending(awaits="job a", deadline=timedelta(minutes=5))


def test_a_run_without_pending_operations_never_reads_them(launch, script):
    script([[tool_use("t_echo", text="x")], [text("done")]])
    run = launch()
    with CaptureQueriesContext(connection) as queries:
        assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    assert not [q for q in queries.captured_queries if "pendingoperation" in q["sql"]]


def test_an_agent_may_send_every_late_operation_to_a_person(test_agent, no_enqueue, script):
    script([[tool_use("t_start", job="a")], [text("Waiting.")]])
    agent = dataclasses.replace(test_agent, on_pending_timeout="person")
    run = engine.launch(agent=agent, input={"task": "t", "script": ""}, provider="scripted")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    op = PendingOperation.objects.get(run=run)
    assert op.on_timeout == "person"  # the tool said "agent"
    pending.sweep(now=op.deadline)
    op.refresh_from_db()
    assert op.status == Status.ESCALATED
