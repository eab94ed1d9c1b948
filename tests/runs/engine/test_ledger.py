"""The idempotency ledger and retries: no side effect happens twice, none is silently lost.

A worker death is simulated in-process by an exception no engine code catches, raised exactly
where a SIGKILL would hurt most: after a tool's effect, before its outcome is recorded.
(test_crash_resume.py does it with a real process and SIGKILL.)
"""

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from agentkit.llm.scripted import text, tool_use
from agentkit.tools import breaker
from approvals.models import Approval
from demo.models import OutboxEmail, Refund
from runs import engine
from runs.engine import retry
from runs.models import Run, SideEffect, Step, args_hash

from .. import harness
from ..harness import CALLS, FAILURES_LEFT, assert_timeline_sound, drive, tool_steps

# Plain (rolled back) tests: these check decisions, not commits; the tests that need
# commits other connections can see (races, crashes, slices) are transactional.
pytestmark = pytest.mark.django_db


class WorkerDied(BaseException):
    """Escapes every `except Exception` in the engine, like the process vanishing."""


@pytest.fixture
def die_after():
    """die_after("tool"): the worker dies right after that tool's effect, once."""
    restore = []

    def arm(tool_name: str) -> None:
        def die() -> None:
            raise WorkerDied(tool_name)

        restore.append(harness.die_after(tool_name, die))

    yield arm
    for put_back in restore:
        put_back()


def crash(run: Run) -> None:
    with pytest.raises(WorkerDied):
        engine.advance(run.pk, time_slice=30)
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING and run.lease_owner


def expire_lease_and_sweep(run: Run, no_enqueue: list[str]) -> None:
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    no_enqueue.clear()
    assert engine.sweep() == 1
    assert no_enqueue == [str(run.pk)]


def answer(approval: Approval, value: str, user) -> None:
    """What the approvals decision service does for an answer, under the run's row lock."""
    with transaction.atomic():
        run = Run.locked(approval.run_id)
        Approval.objects.filter(pk=approval.pk).update(
            status=Approval.Status.ANSWERED,
            answer=value,
            decided_at=timezone.now(),
            decided_by=user,
        )
        run.append_step(Step.Kind.DECISION, {"approval": str(approval.pk), "answer": value})
        assert run.resume("all decisions made")


def test_an_intent_without_outcome_is_retried_with_the_same_key(
    launch, script, die_after, no_enqueue
):
    provider = script(harness.refund_then_email())
    run = launch()
    die_after("issue_refund")
    crash(run)
    effect = SideEffect.objects.get(run=run, tool="issue_refund")
    assert effect.status == SideEffect.Status.INTENT
    assert Refund.objects.count() == 1  # the effect happened, its record did not
    assert not tool_steps(run, "issue_refund")

    expire_lease_and_sweep(run, no_enqueue)
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED

    effect.refresh_from_db()
    assert effect.status == SideEffect.Status.COMMITTED and effect.attempts == 2
    refund = Refund.objects.get()
    assert refund.idempotency_key == effect.key
    [step] = tool_steps(run, "issue_refund")
    assert step["idempotency_key"] == effect.key
    assert step["result"]["replayed"] is True
    assert OutboxEmail.objects.count() == 1
    # The model is never asked again for a turn it already answered.
    assert provider.calls == 3 == run.steps.filter(kind=Step.Kind.LLM).count()
    assert run.steps.filter(data__event="resumed").count() == 1
    assert_timeline_sound(run)


def test_a_committed_effect_is_never_repeated(launch, script, die_after, no_enqueue):
    script([[tool_use("t_charge", amount=5)], [text("charged")]])
    run = launch()
    die_after("t_charge")
    crash(run)
    # The dead worker's outcome reached the ledger (e.g. it was fenced off mid-record).
    effect = SideEffect.objects.get(run=run)
    SideEffect.objects.filter(pk=effect.pk).update(
        status=SideEffect.Status.COMMITTED, result={"result": {"charged": 5}}
    )
    expire_lease_and_sweep(run, no_enqueue)
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED
    assert CALLS["t_charge"] == 1
    [step] = tool_steps(run, "t_charge")
    assert step["result"] == {"charged": 5}


def test_without_key_support_an_unknown_outcome_waits_for_an_operator(
    launch, script, die_after, no_enqueue, plain_user
):
    provider = script(harness.email_only())
    run = launch()
    die_after("send_customer_email")
    crash(run)
    assert OutboxEmail.objects.count() == 1
    expire_lease_and_sweep(run, no_enqueue)
    assert drive(run) == [Run.Status.WAITING]

    effect = SideEffect.objects.get(run=run)
    assert effect.status == SideEffect.Status.UNKNOWN
    question = Approval.objects.get(run=run)
    assert question.kind == Approval.Kind.QUESTION
    assert question.side_effect_id == effect.pk
    assert question.options == ["happened", "did_not_happen"]
    assert "outcome unknown" in question.explanation
    assert OutboxEmail.objects.count() == 1  # nothing re-sent while we wait

    answer(question, "happened", plain_user)
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED
    assert OutboxEmail.objects.count() == 1
    effect.refresh_from_db()
    assert effect.status == SideEffect.Status.COMMITTED
    [step] = tool_steps(run, "send_customer_email")
    assert step["result"]["outcome"] == "confirmed by an operator"
    assert step["result"]["confirmed_by"] == plain_user.username
    assert provider.calls == 2
    assert_timeline_sound(run)


def test_did_not_happen_sends_once_more_under_the_same_key(
    launch, script, monkeypatch, no_enqueue, plain_user
):
    script(harness.email_only())
    run = launch()

    # The worker dies inside the call, before the message left.
    def die(self, *args, **kwargs):
        raise WorkerDied("send")

    with monkeypatch.context() as m:
        m.setattr("django.core.mail.EmailMessage.send", die)
        crash(run)
    assert OutboxEmail.objects.count() == 0
    key = SideEffect.objects.get(run=run).key

    expire_lease_and_sweep(run, no_enqueue)
    assert drive(run) == [Run.Status.WAITING]
    answer(Approval.objects.get(run=run), "did_not_happen", plain_user)
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED
    assert OutboxEmail.objects.count() == 1
    effect = SideEffect.objects.get(run=run)
    assert (effect.key, effect.status, effect.attempts) == (key, SideEffect.Status.COMMITTED, 2)
    [step] = tool_steps(run, "send_customer_email")
    assert step["idempotency_key"] == key and not step["is_error"]


def test_an_unclear_answer_does_not_repeat_the_effect(
    launch, script, die_after, no_enqueue, plain_user
):
    script(harness.email_only())
    run = launch()
    die_after("send_customer_email")
    crash(run)
    expire_lease_and_sweep(run, no_enqueue)
    drive(run)
    answer(Approval.objects.get(run=run), "not sure, maybe?", plain_user)
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED
    assert OutboxEmail.objects.count() == 1
    assert tool_steps(run, "send_customer_email")[0]["result"]["outcome"] == "not repeated"


def test_a_second_death_after_did_not_happen_asks_again(
    launch, script, die_after, no_enqueue, plain_user
):
    script(harness.email_only())
    run = launch()
    die_after("send_customer_email")
    crash(run)
    OutboxEmail.objects.all().delete()  # the operator checked: it never left
    expire_lease_and_sweep(run, no_enqueue)
    drive(run)
    answer(Approval.objects.get(run=run), "did_not_happen", plain_user)
    die_after("send_customer_email")
    crash(run)
    expire_lease_and_sweep(run, no_enqueue)
    assert drive(run) == [Run.Status.WAITING]
    second = Approval.objects.get(run=run, status=Approval.Status.PENDING)
    assert second.tool_use_id.endswith(":unknown:2")
    assert OutboxEmail.objects.count() == 1


def test_a_re_run_after_did_not_happen_uses_the_approved_edited_arguments(
    launch, script, die_after, no_enqueue, plain_user
):
    script([[tool_use("t_gated", n=1)], [text("done")]])
    run = launch()
    assert drive(run) == [Run.Status.WAITING]
    gate = Approval.objects.get(run=run)
    with transaction.atomic():
        locked = Run.locked(run.pk)
        Approval.objects.filter(pk=gate.pk).update(
            status=Approval.Status.APPROVED,
            edited_args={"n": 2},
            approved_args_hash=args_hash("t_gated", {"n": 2}),
            decided_at=timezone.now(),
            decided_by=plain_user,
        )
        assert locked.resume("all decisions made")
    die_after("t_gated")
    crash(run)
    expire_lease_and_sweep(run, no_enqueue)
    assert drive(run) == [Run.Status.WAITING]
    answer(
        Approval.objects.get(run=run, status=Approval.Status.PENDING), "did_not_happen", plain_user
    )
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED
    effect = SideEffect.objects.get(run=run)  # one effect, one key, across the retry
    assert effect.args == {"n": 2} and effect.attempts == 2
    [step] = tool_steps(run, "t_gated")
    assert step["args"] == {"n": 2} and step["result"] == {"done": 2}  # what really ran
    assert CALLS["t_gated"] == 2


def test_keys_come_from_stable_ids_and_differ_per_call():
    key = engine.idempotency_key("r1", 4, 0, "issue_refund", {"order_id": 7, "amount": "10.00"})
    same = engine.idempotency_key("r1", 4, 0, "issue_refund", {"amount": "10.00", "order_id": 7})
    assert key == same  # argument order does not matter
    assert key != engine.idempotency_key("r1", 6, 0, "issue_refund", {"order_id": 7})
    assert key != engine.idempotency_key("r1", 4, 1, "issue_refund", {"order_id": 7})
    assert key != engine.idempotency_key("r2", 4, 0, "issue_refund", {"order_id": 7})


def test_the_same_effect_in_two_turns_gets_two_keys(launch, script):
    script([[tool_use("t_charge", amount=1)], [tool_use("t_charge", amount=1)], [text("ok")]])
    run = launch()
    drive(run)
    keys = list(SideEffect.objects.filter(run=run).values_list("key", flat=True))
    assert len(set(keys)) == 2 and CALLS["t_charge"] == 2
    assert not SideEffect.objects.filter(run=run).exclude(status=SideEffect.Status.COMMITTED)


def test_read_only_tools_do_not_touch_the_ledger(launch, script):
    script([[tool_use("t_echo", text="a")], [text("ok")]])
    run = launch()
    drive(run)
    assert not SideEffect.objects.exists()


# --- retries ---------------------------------------------------------------------------------
@pytest.fixture
def sleeps(monkeypatch) -> list[float]:
    """The backoff delays the engine chose (it still sleeps them; they are milliseconds)."""
    delays: list[float] = []
    real = retry.backoff

    def recording(*args, **kwargs):
        delay = real(*args, **kwargs)
        delays.append(delay)
        return delay

    monkeypatch.setattr(retry, "backoff", recording)
    return delays


def test_infrastructure_errors_are_retried_with_capped_backoff(launch, script, sleeps):
    FAILURES_LEFT["t_flaky"] = 2
    script([[tool_use("t_flaky", n=1)], [text("ok")]])
    run = launch()
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED
    [step] = tool_steps(run)
    assert step["result"] == {"ok": 1} and step["attempts"] == 3
    assert CALLS["t_flaky"] == 3
    assert len(sleeps) == 2 and all(0 <= d <= harness.FAST_RETRY.max_seconds for d in sleeps)
    assert run.retry_count == 2 and run.consecutive_errors == 0


def test_infrastructure_retries_stop_at_the_tool_policy(launch, script, sleeps):
    FAILURES_LEFT["t_flaky"] = 100
    script([[tool_use("t_flaky", n=1)], [text("ok")]])
    run = launch()
    drive(run)
    [step] = tool_steps(run)
    assert step["is_error"] and "after 3 attempts" in step["error"]
    assert CALLS["t_flaky"] == 3 and len(sleeps) == 2


def test_infrastructure_retries_stop_at_the_run_cap(launch, script, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "RUN_MAX_RETRIES": 1}
    FAILURES_LEFT["t_flaky"] = 100
    script([[tool_use("t_flaky", n=1)], [text("ok")]])
    run = launch()
    drive(run)
    assert CALLS["t_flaky"] == 2


def test_an_effect_without_key_support_is_not_retried_blindly(launch, script, plain_user):
    FAILURES_LEFT["t_notify"] = 1
    script([[tool_use("t_notify", to="ops")], [text("ok")]])
    run = launch()
    assert drive(run) == [Run.Status.WAITING]
    assert CALLS["t_notify"] == 1  # a timeout may hide a delivered message: not repeated
    effect = SideEffect.objects.get(run=run)
    assert effect.status == SideEffect.Status.UNKNOWN
    question = Approval.objects.get(run=run)
    assert question.side_effect_id == effect.pk
    answer(question, "did_not_happen", plain_user)
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED
    assert CALLS["t_notify"] == 2
    [step] = tool_steps(run, "t_notify")
    assert step["result"] == {"notified": "ops"} and step["idempotency_key"] == effect.key


def test_business_errors_are_never_retried(launch, script, sleeps):
    script([[tool_use("t_fail", n=1)], [text("ok")]])
    run = launch()
    drive(run)
    [step] = tool_steps(run)
    assert step["is_error"] and step["attempts"] == 1 and step["error"] == "refused #1"
    assert CALLS["t_fail"] == 1 and sleeps == []


def test_the_circuit_breaker_opens_after_repeated_failures_and_fails_fast(launch, script):
    assert breaker.threshold == 5
    script([[tool_use("t_down", n=i)] for i in range(3)] + [[text("gave up")]])
    run = launch(max_consecutive_errors=5)
    drive(run)
    first, second, third = tool_steps(run)
    assert first["attempts"] == 3 and "after 3 attempts" in first["error"]
    assert "circuit open" in second["error"]  # opened at its second failure
    assert "circuit open" in third["error"] and third["attempts"] == 1
    assert CALLS["t_down"] == 5  # nothing reached the broken upstream once it was open
    assert run.termination_reason == Run.Termination.COMPLETED


def test_backoff_is_exponential_with_full_jitter_and_capped():
    for attempt in range(1, 12):
        ceiling = min(8.0, 1.0 * 2 ** (attempt - 1))
        delays = [engine.backoff(attempt, base=1.0, cap=8.0) for _ in range(50)]
        assert all(0 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 1  # jittered, so retries from many runs do not align
    # A server's retry-after is a floor, but never beyond the cap.
    assert engine.backoff(1, retry_after=3.0, base=0.01, cap=30) >= 3.0
    assert engine.backoff(1, retry_after=300.0, base=0.01, cap=30) == 30
