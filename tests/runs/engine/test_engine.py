"""The loop itself: checkpoints, context budget, time slices, leases and the sweep, Celery."""

import itertools
import sys
import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agentkit.llm.scripted import text, tool_use
from agentops.celery import app as celery_app
from approvals.models import Approval
from runs import engine, queue
from runs.engine import owned, tool_calls
from runs.models import Checkpoint, Run, SideEffect, Step
from runs.tasks import advance_run

from ..harness import CALLS, assert_timeline_sound, drive, tool_steps, worker_thread

pytestmark = pytest.mark.django_db(transaction=True)


def three_tool_turns():
    return [
        [text("first"), tool_use("t_echo", text="a"), tool_use("t_charge", amount=1)],
        [tool_use("t_echo", text="b")],
        [tool_use("t_charge", amount=2)],
        [text("finished")],
    ]


def test_every_step_is_persisted_with_a_checkpoint(launch, script):
    script(three_tool_turns())
    run = launch()
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED
    kinds = list(run.steps.order_by("seq").values_list("kind", flat=True))
    assert kinds == [
        "status",  # launched
        "status",  # started
        "llm",
        "tool",
        "tool",
        "llm",
        "tool",
        "llm",
        "tool",
        "llm",
        "status",  # terminated
    ]
    # Each write is followed by the state to resume from, at the seq of its last step: a
    # model step and the results of its calls without side effects are one write (3-4,
    # 6-7; the final answer and the end, 10-11); a call with side effects (t_charge) waits
    # for the model step (8 alone) and is a step of its own (5, 9).
    checkpointed = set(Checkpoint.objects.filter(run=run).values_list("seq", flat=True))
    assert checkpointed == {1, 4, 5, 7, 8, 9, 11}
    assert Checkpoint.objects.filter(run=run).latest("seq").state["pending"] == []
    assert run.step_count == 4 and run.tokens_in > 0 and run.cost_usd > 0
    assert_timeline_sound(run)


def test_the_conversation_is_rebuilt_from_the_timeline(launch, script):
    provider = script(three_tool_turns())
    run = launch()
    drive(run)
    rebuilt = engine.conversation(run)
    # What the model saw last is exactly what the timeline says, plus its final answer.
    assert rebuilt[:-1] == provider.requests[-1].messages
    assert rebuilt[-1] == {"role": "assistant", "content": [text("finished")]}


def test_older_turns_are_trimmed_for_the_model_but_kept_in_the_timeline(launch, script, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "CONTEXT_TOKEN_BUDGET": 3000}
    turns = [[tool_use("t_big", n=i, size=3000)] for i in range(6)] + [[text("done")]]
    provider = script(turns)
    run = launch()
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED

    last = provider.requests[-1].messages
    assert last[0]["role"] == "user"
    assert last[0]["content"].startswith("test")  # the task is always kept...
    assert "earlier turn(s) were left out" in last[0]["content"]  # ...and says what is missing
    assert len(last) < len(engine.conversation(run)) - 1
    for request in provider.requests:
        _assert_tool_pairs_intact(request.messages)
    trimmed = [s.data["trimmed_turns"] for s in run.steps.filter(kind=Step.Kind.LLM)]
    assert trimmed[0] == 0 and trimmed[-1] > 0
    # The database keeps every result in full.
    results = [d["result"] for d in tool_steps(run, "t_big")]
    assert [r.split(":")[0] for r in results] == [str(i) for i in range(6)]
    assert all(len(r) > 3000 for r in results)


def _assert_tool_pairs_intact(messages: list[dict]) -> None:
    roles = [m["role"] for m in messages]
    assert roles == ["user", "assistant"] * (len(roles) // 2) + ["user"] * (len(roles) % 2)
    for previous, message in itertools.pairwise(messages):
        if message["role"] == "user" and isinstance(message["content"], list):
            asked = {b["id"] for b in previous["content"] if b.get("type") == "tool_use"}
            answered = {b["tool_use_id"] for b in message["content"] if "tool_use_id" in b}
            assert answered == asked


def test_a_short_conversation_is_sent_untouched():
    messages = [{"role": "user", "content": "hi"}]
    assert engine.fit_context(messages, 10) == (messages, 0)


def test_a_long_run_yields_its_time_slice_and_is_requeued(launch, script, no_enqueue, backlog):
    provider = script(three_tool_turns())
    run = launch()
    assert no_enqueue == [str(run.pk)]
    first = engine.advance(run.pk, time_slice=0)
    assert first == "requeued"
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED and not run.lease_owner
    assert no_enqueue == [str(run.pk)] * 2  # re-enqueued once, after commit
    results = drive(run, time_slice=0)
    assert results[-1] == Run.Status.SUCCEEDED
    assert set(results[:-1]) == {"requeued"}
    # Sliced into one step per task, it did exactly what one long task does.
    assert provider.calls == 4
    assert CALLS["t_echo"] == 2 and CALLS["t_charge"] == 2
    kinds = list(run.steps.values_list("kind", flat=True))
    assert kinds.count("llm") == 4 and kinds.count("tool") == 4
    assert run.steps.filter(data__event="started").count() == 1
    assert_timeline_sound(run)


def test_the_sweep_requeues_a_run_whose_lease_expired(launch, script, no_enqueue):
    provider = script(three_tool_turns())
    run = launch()
    assert engine.claim(run.pk, "dead-worker") is not None
    no_enqueue.clear()
    assert engine.sweep() == 0  # lease still valid: the worker may be alive
    assert engine.advance(run.pk) == "busy"

    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert engine.sweep() == 1 and no_enqueue == [str(run.pk)]
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED
    resumed = run.steps.get(data__event="resumed")
    assert "dead-worker" in resumed.data["detail"]
    assert provider.calls == 4
    assert_timeline_sound(run)


def test_the_sweep_requeues_a_run_stuck_in_queued_once_per_window(launch, no_enqueue):
    stuck = launch()
    fresh = launch()
    Run.objects.filter(pk=stuck.pk).update(updated_at=timezone.now() - timedelta(minutes=5))
    no_enqueue.clear()
    assert engine.sweep() == 1 and no_enqueue == [str(stuck.pk)]
    assert engine.sweep() == 0  # not flooded again on the next sweep
    assert fresh.status == Run.Status.QUEUED


def test_the_sweep_leaves_waiting_and_finished_runs_alone(launch, script, no_enqueue):
    script([[tool_use("t_gated", n=1)]])
    waiting = launch()
    drive(waiting)
    assert waiting.status == Run.Status.WAITING
    done = launch()
    done.cancel()
    Run.objects.update(
        updated_at=timezone.now() - timedelta(hours=1),
        lease_expires_at=timezone.now() - timedelta(hours=1),
    )
    no_enqueue.clear()
    assert engine.sweep() == 0 and no_enqueue == []


def test_a_worker_whose_lease_was_taken_over_cannot_write(launch, script):
    in_call, release = threading.Event(), threading.Event()

    def first_call_hangs(request):
        if threading.current_thread().name == "slow-worker":
            in_call.set()
            release.wait(10)

    provider = script([[tool_use("t_charge", amount=1)], [text("done")]], on_call=first_call_hangs)
    run = launch()
    outcome: list[str] = []
    slow = worker_thread(
        lambda: engine.advance(run.pk, worker="slow"), name="slow-worker", into=outcome
    )
    slow.start()
    assert in_call.wait(10)
    # The slow worker looks dead: its lease ran out and another worker resumed the run.
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert engine.advance(run.pk, worker="fast") == Run.Status.SUCCEEDED
    release.set()
    slow.join(10)
    assert outcome == [Run.Status.SUCCEEDED]  # it stopped without writing anything
    run.refresh_from_db()
    assert provider.calls == 3
    assert run.steps.filter(kind=Step.Kind.LLM).count() == 2
    assert CALLS["t_charge"] == 1
    assert_timeline_sound(run)


def someone_appends_during_the_first_call(request):
    """A decision service appends a step while the run's first model call is in flight."""
    if request.metadata["turn"] == 0:
        with transaction.atomic():
            Run.locked(request.metadata["run_id"]).append_step(
                Step.Kind.DECISION, {"event": "noted", "by": "operator"}
            )


def test_a_step_written_by_someone_else_during_the_call_moves_the_model_step_after_it(
    launch, script
):
    # The model step, its planned tool calls and their checkpoint go in one compare-and-set
    # statement that expects the timeline head the worker knew; here a decision service
    # appends a step meanwhile (the run stays ours), so the step is written after it and the
    # planned calls must name the seq it really got (the idempotency key derives from it).
    script(
        [[tool_use("t_charge", amount=1)], [text("done")]],
        on_call=someone_appends_during_the_first_call,
    )
    run = launch()
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED
    kinds = list(run.steps.order_by("seq").values_list("kind", flat=True))
    assert kinds[2:6] == ["decision", "llm", "tool", "llm"]
    llm_seq = run.steps.filter(kind=Step.Kind.LLM).order_by("seq").first().seq
    effect = SideEffect.objects.get(run=run)
    assert effect.step_seq == llm_seq
    assert effect.key == engine.idempotency_key(run.pk, llm_seq, 0, "t_charge", {"amount": 1})
    planned = Checkpoint.objects.get(run=run, seq=llm_seq).state["pending"]
    assert [item["llm_seq"] for item in planned] == [llm_seq]
    assert CALLS["t_charge"] == 1
    assert_timeline_sound(run)


def test_a_gated_call_names_its_model_step_when_someone_else_wrote_first(launch, script):
    # The same race on the gated path: the model step, its Approval and gate step are one
    # transaction, and the Approval must point at the seq the model step really got.
    script(
        [[tool_use("t_gated", n=1)], [text("done")]], on_call=someone_appends_during_the_first_call
    )
    run = launch()
    assert drive(run) == [Run.Status.WAITING]
    llm_seq = run.steps.get(kind=Step.Kind.LLM).seq
    approval = Approval.objects.get(run=run)
    assert approval.llm_seq == llm_seq and approval.gate_seq == llm_seq + 1
    planned = Checkpoint.objects.filter(run=run).latest("seq").state["pending"]
    assert [item["llm_seq"] for item in planned] == [llm_seq]
    assert CALLS["t_gated"] == 0
    assert_timeline_sound(run)


def test_the_final_answer_and_the_runs_end_are_one_write(launch, script, monkeypatch, no_enqueue):
    # Were they two, a crash between them would leave a finished conversation that a resume
    # sends to the model once more. Here the second half of the write is made to fail.
    provider = script([[text("done")]])
    run = launch()
    next_step = Run._next_step

    def invalid_end(self, kind, data, columns, **kwargs):
        step = next_step(self, kind, data, columns, **kwargs)
        if data.get("event") == "terminated":
            step.kind = "bogus"  # refused by the step_kind_valid constraint
        return step

    monkeypatch.setattr(Run, "_next_step", invalid_end)
    engine.advance(run.pk, worker="w")
    assert provider.calls == 1
    assert not run.steps.filter(kind=Step.Kind.LLM).exists()
    assert not run.steps.filter(data__event="terminated").exists()
    monkeypatch.setattr(Run, "_next_step", next_step)
    run.refresh_from_db()
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now())
    assert engine.advance(run.pk, worker="w2") == Run.Status.SUCCEEDED
    assert list(run.steps.order_by("seq").values_list("kind", flat=True))[-2:] == ["llm", "status"]
    run.refresh_from_db()
    assert_timeline_sound(run)


@pytest.mark.parametrize("ends", [Run.Status.SUCCEEDED, Run.Status.FAILED])
def test_a_plain_runs_end_costs_no_statement_after_its_write(
    launch, script, no_enqueue, monkeypatch, ends
):
    # What a run's end may start (follow-ups, compensation, plans, live pushes) is decided
    # from the run's snapshot: for an agent declaring none of them, nothing is read or sent,
    # neither in the end's transaction nor once it is committed (a per-run cost otherwise,
    # which short runs feel most).
    sent = []
    monkeypatch.setattr(queue, "send_follow_ups", lambda run_id: sent.append("follow-ups"))
    monkeypatch.setattr(queue, "send_compensation", lambda task, run_id: sent.append(task))
    script([[tool_use("t_echo", text="a")], [tool_use("t_echo", text="b")], [text("done")]])
    run = launch(max_steps=1) if ends == Run.Status.FAILED else launch()
    with CaptureQueriesContext(connection) as queries:
        assert engine.advance(run.pk, time_slice=30) == ends
    statements = [q["sql"] for q in queries.captured_queries]
    end_write = max(i for i, sql in enumerate(statements) if '"status" = ' in sql)
    assert f"'{ends}'" in statements[end_write]
    # SQLite: the run's row, then its steps and checkpoint, then COMMIT (Postgres: one
    # statement for all of them, its COMMIT not captured).
    written = ('INSERT INTO "runs_step"', 'INSERT INTO "runs_checkpoint"', "COMMIT")
    assert [sql for sql in statements[end_write + 1 :] if not sql.startswith(written)] == []
    assert sent == []


def test_the_lease_covers_a_slow_model_call(launch, script, settings, no_enqueue):
    settings.AGENTOPS = {**settings.AGENTOPS, "LEASE_SECONDS": 1, "LLM_TIMEOUT_SECONDS": 30}
    during_call: list = []

    def look(request):
        run = Run.objects.get(pk=request.metadata["run_id"])
        during_call.append((run.lease_expires_at - timezone.now(), engine.sweep()))

    script([[tool_use("t_echo", text="a")], [text("done")]], on_call=look)
    run = launch()
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED
    for remaining, swept in during_call:
        # Held for as long as the model may take (not the 1 s lease that lets a dead
        # worker's run be found quickly), so no sweep hands a live call to another worker.
        assert remaining > timedelta(seconds=25) and swept == 0


def _fail_once(monkeypatch, module, name: str, at_call: int) -> None:
    """The engine part's `name` raises an unexpected error the at_call-th time it is called."""
    real = getattr(module, name)
    calls = []

    def flaky(*args, **kwargs):
        calls.append(name)
        if len(calls) == at_call:
            raise RuntimeError("database hiccup")
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, flaky)


def test_an_unexpected_engine_error_is_recorded_and_the_run_retried(
    launch, script, monkeypatch, no_enqueue
):
    provider = script(
        [[tool_use("t_echo", text="a"), tool_use("t_charge", amount=1)], [text("ok")]]
    )
    run = launch()
    # The model step (with t_echo's result) is written; recording t_charge's result fails.
    _fail_once(monkeypatch, owned, "append", at_call=2)
    no_enqueue.clear()
    assert engine.advance(run.pk) == "requeued"
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED and run.retry_count == 1
    assert no_enqueue == [str(run.pk)]
    assert run.steps.get(data__event="error").data["detail"] == "RuntimeError: database hiccup"
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED
    assert provider.calls == 2  # resumed from the checkpoint: the recorded turn is not asked again
    assert [s["tool"] for s in tool_steps(run)] == ["t_echo", "t_charge"]
    # The intent without outcome was retried with its key (t_charge honours keys): one entry.
    assert SideEffect.objects.get(run=run).status == SideEffect.Status.COMMITTED


def test_an_engine_error_before_the_model_step_is_written_still_charges_the_answer(
    launch, script, monkeypatch, no_enqueue
):
    provider = script([[tool_use("t_echo", text="a")], [text("ok")]])
    run = launch()
    # While t_echo runs, before the write.
    _fail_once(monkeypatch, tool_calls, "call_tool", at_call=1)
    assert engine.advance(run.pk) == "requeued"
    run.refresh_from_db()
    assert not run.steps.filter(kind=Step.Kind.LLM).exists()
    lost = run.cost_usd
    assert lost > 0 and run.tokens_in > 0
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED
    assert provider.calls == 3  # the lost answer was asked for again
    recorded = sum(s.cost_usd for s in run.steps.filter(kind=Step.Kind.LLM))
    assert run.cost_usd == recorded + lost


# --- Celery -----------------------------------------------------------------------------------
def test_celery_is_configured_for_durable_io_bound_runs(settings):
    conf = celery_app.conf
    assert conf.task_acks_late and conf.task_reject_on_worker_lost
    assert advance_run.acks_late and advance_run.reject_on_worker_lost
    assert conf.worker_prefetch_multiplier == 1
    assert conf.worker_pool == "threads" and conf.worker_concurrency >= 10
    # A redelivered message must not overtake a task still running: the longest a task can
    # take (a time slice, then a step whose model call is retried to the limit) stays far
    # below the visibility timeout. Celery time limits do not apply on the threads pool;
    # these deadlines are enforced by the engine itself.
    agentops = settings.AGENTOPS
    retries = agentops["LLM_MAX_RETRIES"]
    longest_task = (
        agentops["TIME_SLICE_SECONDS"]
        + (retries + 1) * agentops["LLM_TIMEOUT_SECONDS"]
        + retries * 30  # backoff cap
    )
    assert conf.broker_transport_options["visibility_timeout"] > 2 * longest_task
    assert agentops["LEASE_SECONDS"] < conf.broker_transport_options["visibility_timeout"]
    assert "sweep-expired-leases" in conf.beat_schedule


def test_a_worker_imports_the_model_sdk_when_it_starts():
    from celery.signals import worker_init

    from agentops.celery import preload_model_sdk

    # Not on first use by hundreds of threads at once (bench/model_latency.py's cold round).
    assert preload_model_sdk in [ref() for _, ref in worker_init.receivers]
    import agentkit.llm

    saved = sys.modules.pop("agentkit.llm.anthropic", None)
    try:
        preload_model_sdk()
        assert "agentkit.llm.anthropic" in sys.modules
    finally:
        if saved is not None:
            sys.modules["agentkit.llm.anthropic"] = saved
            agentkit.llm.anthropic = saved


def test_without_a_backlog_a_run_keeps_its_thread_past_the_slice(
    launch, script, no_enqueue, monkeypatch
):
    asked = []
    monkeypatch.setattr(queue, "runs_waiting", lambda: asked.append(1) or False)
    provider = script(three_tool_turns())
    run = launch()
    assert engine.advance(run.pk, time_slice=0) == Run.Status.SUCCEEDED
    assert no_enqueue == [str(run.pk)]  # the launch only: never re-queued
    assert provider.calls == 4 and len(asked) >= 4  # asked at each slice's end
    assert Run.objects.get(pk=run.pk).steps.filter(data__event="started").count() == 1


def test_runs_waiting_reads_the_broker_queue():
    # The embedded memory transport here; Redis when REDIS_URL is set (CI runs both).
    celery_app.control.purge()
    assert queue.runs_waiting() is False
    celery_app.send_task("runs.tasks.advance_run", args=["00000000-0000-0000-0000-000000000000"])
    try:
        assert queue.runs_waiting() is True
    finally:
        celery_app.control.purge()
    assert queue.runs_waiting() is False


def test_runs_waiting_answers_yes_at_once_when_the_broker_is_unreachable(monkeypatch):
    from kombu import Connection

    attempts = []
    real_connect = Connection._connection_factory

    def counting_connect(self, *args, **kwargs):
        attempts.append(1)
        return real_connect(self, *args, **kwargs)

    monkeypatch.setattr(Connection, "_connection_factory", counting_connect)
    with Connection("redis://127.0.0.1:1/0") as unreachable:
        monkeypatch.setattr(celery_app, "_pool", unreachable.Pool(limit=1))
        assert queue.runs_waiting() is True  # unknown counts as waiting: yield the slice
    # An attempt and kombu's one retry (max_retries=1), not its reconnect loop, which would
    # try again and again until its timeout.
    assert len(attempts) <= 2


def test_the_task_runs_one_slice_of_the_run(launch, script, no_enqueue, settings, backlog):
    settings.AGENTOPS = {**settings.AGENTOPS, "TIME_SLICE_SECONDS": 0}
    script(three_tool_turns())
    run = launch()
    assert advance_run.run(str(run.pk)) == "requeued"
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED and run.step_count == 1
