"""A real worker process is SIGKILLed between a tool's side effect and its checkpoint.

The worker subprocess replaces the tool named in TEST_KILL_AFTER_TOOL with one that kills the
process right after the real effect (tests/runs/harness.py `die_after`), the worst moment:
the refund is written, its outcome is not. The sweep then re-enqueues the run once its lease
has expired, another process resumes it, and the ledger and the refunds table show every
effect exactly once. Runs on SQLite (a file database both processes open) and on Postgres
(the shared test database).
"""

import signal
import subprocess
import time

import pytest
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from approvals.models import Approval
from demo.models import OutboxEmail, Refund
from runs import engine
from runs.models import Run, SideEffect, Step
from tests.conftest import on_postgres

from ..harness import assert_timeline_sound, tool_steps
from ..worker_processes import celery_worker, one_shot, stop

pytestmark = pytest.mark.django_db(transaction=True)

LEASE_SECONDS = 1.0


def worker(*args: str, **env: str) -> subprocess.CompletedProcess:
    process = one_shot(*args, AGENTOPS_LEASE_SECONDS=str(LEASE_SECONDS), **env)
    out, err = process.communicate(timeout=120)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def kill_worker_after(tool: str, run: Run) -> None:
    died = worker("advance", str(run.pk), TEST_KILL_AFTER_TOOL=tool)
    assert died.returncode == -signal.SIGKILL, died.stderr[-3000:]
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING and run.lease_owner  # left behind, leased


def wait_for_lease_to_expire(run: Run) -> None:
    deadline = time.monotonic() + 10 * LEASE_SECONDS
    while not Run.objects.filter(pk=run.pk, lease_expires_at__lt=timezone.now()).exists():
        assert time.monotonic() < deadline, "the dead worker's lease never expired"
        time.sleep(0.1)


def sweep_in_another_process() -> None:
    swept = worker("sweep")
    assert swept.returncode == 0, swept.stderr[-3000:]
    assert swept.stdout.strip().splitlines()[-1] == "1"


def test_it_resumes_after_worker_is_killed_and_refunds_once(launch):
    run = launch(script="refund_then_email")
    kill_worker_after("issue_refund", run)
    dead_worker = run.lease_owner
    refund = Refund.objects.get()  # the effect happened...
    intent = SideEffect.objects.get(run=run)
    assert intent.status == SideEffect.Status.INTENT  # ...its outcome was never recorded
    assert refund.idempotency_key == intent.key
    assert not tool_steps(run, "issue_refund")

    assert engine.sweep() == 0  # the lease has not expired yet: the worker might be alive
    wait_for_lease_to_expire(run)
    sweep_in_another_process()

    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED, run.status_detail
    assert run.termination_reason == Run.Termination.COMPLETED
    # Exactly once: one refund, one ledger entry per effect, one tool step per call.
    assert Refund.objects.count() == 1
    assert Refund.objects.get().pk == refund.pk
    ledger = {e.tool: e for e in SideEffect.objects.filter(run=run)}
    assert sorted(ledger) == ["issue_refund", "send_customer_email"]
    assert {e.status for e in ledger.values()} == {SideEffect.Status.COMMITTED}
    assert ledger["issue_refund"].attempts == 2  # retried once, with the same key
    assert ledger["issue_refund"].key == intent.key
    [refund_step] = tool_steps(run, "issue_refund")
    assert refund_step["result"]["refund_id"] == refund.pk
    assert refund_step["result"]["replayed"] is True
    assert len(tool_steps(run, "send_customer_email")) == 1
    assert OutboxEmail.objects.count() == 1
    # The model was not asked again for the turn it had answered before the crash.
    assert run.steps.filter(kind=Step.Kind.LLM).count() == 3
    resumed = run.steps.get(data__event="resumed")
    assert dead_worker in resumed.data["detail"]
    assert_timeline_sound(run)


def test_a_killed_send_without_key_support_asks_the_operator(launch, plain_user):
    run = launch(script="email_only")
    kill_worker_after("send_customer_email", run)
    assert OutboxEmail.objects.count() == 1
    wait_for_lease_to_expire(run)
    sweep_in_another_process()

    run.refresh_from_db()
    assert run.status == Run.Status.WAITING
    effect = SideEffect.objects.get(run=run)
    assert effect.status == SideEffect.Status.UNKNOWN
    question = Approval.objects.get(run=run, status=Approval.Status.PENDING)
    assert question.side_effect_id == effect.pk

    with transaction.atomic():
        locked = Run.locked(run.pk)
        Approval.objects.filter(pk=question.pk).update(
            status=Approval.Status.ANSWERED,
            answer="happened",
            decided_at=timezone.now(),
            decided_by=plain_user,
        )
        assert locked.resume("all decisions made")
    result = worker("advance", str(run.pk))
    assert result.returncode == 0, result.stderr[-3000:]
    run.refresh_from_db()
    assert run.termination_reason == Run.Termination.COMPLETED
    assert OutboxEmail.objects.count() == 1  # not sent twice
    assert len(tool_steps(run, "send_customer_email")) == 1
    assert_timeline_sound(run)


# --- the same with real Celery workers (needs the Redis broker: the embedded memory broker
# --- cannot be shared between processes) ----------------------------------------------------
def wait_until_finished(run: Run, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        run.refresh_from_db()
        if run.status not in Run.ACTIVE_STATUSES:
            return
        assert time.monotonic() < deadline, f"run still {run.status}"
        time.sleep(0.2)


@on_postgres
@pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL (a broker other processes see)")
def test_a_celery_worker_killed_mid_refund_is_resumed_by_another(test_agent):
    from agentops.celery import app

    app.control.purge()  # stale messages from earlier tests would only slow the workers down
    first = celery_worker(
        "doomed", TEST_KILL_AFTER_TOOL="issue_refund", AGENTOPS_LEASE_SECONDS=str(LEASE_SECONDS)
    )
    second = None
    try:
        run = engine.launch(
            agent=test_agent,
            input={"task": "refund", "script": "refund_then_email"},
            provider="scripted",
        )  # enqueued to Redis on commit; the doomed worker takes it
        assert first.wait(90) == -signal.SIGKILL, first.stderr.read()[-3000:]
        run.refresh_from_db()
        assert run.status == Run.Status.RUNNING
        assert SideEffect.objects.get(run=run).status == SideEffect.Status.INTENT
        assert Refund.objects.count() == 1

        # acks_late: the killed worker's message is not lost, but Redis only redelivers it
        # after the visibility timeout (an hour). The sweep brings the run back in seconds.
        second = celery_worker("survivor", AGENTOPS_LEASE_SECONDS=str(LEASE_SECONDS))
        wait_for_lease_to_expire(run)
        assert engine.sweep() == 1
        wait_until_finished(run)
    finally:
        stop(first)
        if second is not None:
            stop(second)

    assert run.termination_reason == Run.Termination.COMPLETED, run.status_detail
    assert Refund.objects.count() == 1
    assert SideEffect.objects.filter(run=run, status=SideEffect.Status.COMMITTED).count() == 2
    assert len(tool_steps(run, "issue_refund")) == 1
    assert OutboxEmail.objects.count() == 1
    assert_timeline_sound(run)
