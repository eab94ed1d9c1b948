"""Workers racing for one run: exactly one executes each step.

Each thread has its own database connection, so on Postgres these are truly concurrent
transactions contending for the run's row lock; on SQLite they queue on the write lock.
"""

import threading
import time
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from agentkit.llm.scripted import text, tool_use
from approvals.models import Approval
from runs import engine, sql
from runs.engine import lease
from runs.models import Run, SideEffect, Step

from ..harness import CALLS, FAILURES_LEFT, assert_timeline_sound, drive, tool_steps, worker_thread

pytestmark = pytest.mark.django_db(transaction=True)

TURNS = 6


def charging_turns():
    return [
        [tool_use("t_charge", amount=i), tool_use("t_echo", text=f"step {i}")] for i in range(TURNS)
    ] + [[text("done")]]


def race(workers: int, target) -> list:
    """Start `workers` threads at the same instant; their results."""
    start = threading.Barrier(workers)
    results: list = []

    def go(i: int):
        start.wait(10)
        return target(i)

    threads = [
        worker_thread((lambda i=i: go(i)), name=f"racer-{i}", into=results) for i in range(workers)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors
    return results


def assert_each_step_done_once(run: Run, provider) -> None:
    run.refresh_from_db()
    assert run.termination_reason == Run.Termination.COMPLETED, run.status_detail
    assert_timeline_sound(run)
    assert provider.calls == run.steps.filter(kind=Step.Kind.LLM).count() == TURNS + 1
    assert CALLS["t_charge"] == TURNS and CALLS["t_echo"] == TURNS
    assert len(tool_steps(run)) == 2 * TURNS
    effects = SideEffect.objects.filter(run=run)
    assert effects.count() == TURNS
    assert set(effects.values_list("status", flat=True)) == {SideEffect.Status.COMMITTED}
    assert sorted(e.args["amount"] for e in effects) == list(range(TURNS))


def test_two_workers_started_together_run_it_once(launch, script):
    provider = script(charging_turns(), latency=0.005)
    run = launch()
    results = race(2, lambda i: engine.advance(run.pk, worker=f"w{i}", time_slice=30))
    assert sorted(results) == ["busy", Run.Status.SUCCEEDED]
    assert_each_step_done_once(run, provider)
    assert run.steps.filter(data__event="started").count() == 1


def test_workers_competing_for_every_slice_never_repeat_a_step(launch, script, backlog):
    provider = script(charging_turns(), latency=0.002)
    run = launch()

    def keep_advancing(i: int) -> int:
        worked = 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            result = engine.advance(run.pk, worker=f"w{i}", time_slice=0)
            if result == "requeued":
                worked += 1
            elif result != "busy":
                return worked
            status = Run.objects.values_list("status", flat=True).get(pk=run.pk)
            if status not in Run.ACTIVE_STATUSES:
                return worked
        raise AssertionError("the run did not finish")

    worked = race(4, keep_advancing)
    assert_each_step_done_once(run, provider)
    assert sum(worked) >= 2 * TURNS  # the work was really shared out, slice by slice


def test_two_workers_taking_over_an_expired_lease_only_one_wins(launch, script):
    script(charging_turns())
    run = launch()
    assert engine.claim(run.pk, "dead") is not None
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    claims = race(3, lambda i: engine.claim(run.pk, f"w{i}"))
    winners = [c for c in claims if c is not None]
    assert len(winners) == 1
    run.refresh_from_db()
    assert run.lease_owner == winners[0].run.lease_owner
    assert run.steps.filter(data__event="resumed").count() == 1
    assert_timeline_sound(run)


def test_a_takeover_loses_to_a_holder_that_renewed_after_it_looked(launch, script, monkeypatch):
    script(charging_turns())
    run = launch()
    assert engine.claim(run.pk, "slow") is not None
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    read = sql.get_with

    def holder_renews_right_after_the_read(model, pk, also):
        seen = read(model, pk, also)  # expired, as far as the would-be taker can tell
        Run.objects.filter(pk=pk, lease_owner="slow").update(
            lease_expires_at=timezone.now() + timedelta(seconds=60)
        )
        return seen

    monkeypatch.setattr(sql, "get_with", holder_renews_right_after_the_read)
    assert engine.claim(run.pk, "taker") is None
    run.refresh_from_db()
    assert run.lease_owner == "slow"
    assert not run.steps.filter(data__event="resumed").exists()


# --- a decision racing the worker that is about to park the run --------------------------------
@pytest.fixture
def quick_decider(monkeypatch, plain_user):
    """The approver decides in the instant between the gate's commit and the run parking in
    `waiting`: the decision service finds the run still running and cannot requeue it."""

    def arm(**decision):
        real = lease.park_for_humans

        def decide_first(work):
            for approval in Approval.objects.filter(run_id=work.run.pk, status="pending"):
                with transaction.atomic():
                    locked = Run.locked(work.run.pk)
                    Approval.objects.filter(pk=approval.pk).update(
                        decided_at=timezone.now(), decided_by=plain_user, **decision
                    )
                    assert not locked.resume("all decisions made")
            return real(work)

        monkeypatch.setattr(lease, "park_for_humans", decide_first)

    return arm


def test_an_approval_decided_before_the_run_parks_is_not_lost(launch, script, quick_decider):
    quick_decider(status=Approval.Status.APPROVED)
    script([[tool_use("t_gated", n=1)], [text("done")]])
    run = launch()
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED, run.status_detail
    assert CALLS["t_gated"] == 1
    assert_timeline_sound(run)


def test_an_unknown_outcome_answered_before_the_run_parks_is_not_lost(
    launch, script, quick_decider
):
    FAILURES_LEFT["t_notify"] = 1
    quick_decider(status=Approval.Status.ANSWERED, answer="happened")
    script([[tool_use("t_notify", to="ops")], [text("done")]])
    run = launch()
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED, run.status_detail
    assert CALLS["t_notify"] == 1
    [step] = tool_steps(run, "t_notify")
    assert step["result"]["outcome"] == "confirmed by an operator"
