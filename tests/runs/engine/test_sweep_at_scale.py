"""The sweep at scale: every expired lease in one sweep, in batches; a backlog is not taken
for lost messages; what the broker did lose is found by its marker or by the run's own
`unsent` mark, never by age alone while runs wait in the queue."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agentops.celery import app as celery_app
from runs import engine, queue
from runs.engine import lease
from runs.models import Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def empty_queues():
    celery_app.control.purge()
    yield
    celery_app.control.purge()


@pytest.fixture
def a_backlog(empty_queues):
    """A message waits in a run queue: workers are behind."""
    celery_app.send_task(queue.ADVANCE_TASK, args=["00000000-0000-0000-0000-000000000000"])
    assert queue.depth() == 1


def many(launch, count: int, **fields) -> list[str]:
    first = launch()
    Run.objects.bulk_create(
        [
            Run(
                agent=first.agent,
                agent_config=first.agent_config,
                provider=first.provider,
                input=first.input,
                max_steps=first.max_steps,
                max_cost_usd=first.max_cost_usd,
                max_seconds=first.max_seconds,
                max_consecutive_errors=first.max_consecutive_errors,
            )
            for _ in range(count - 1)
        ]
    )
    Run.objects.update(**fields)
    return [str(pk) for pk in Run.objects.values_list("pk", flat=True)]


def test_one_sweep_resends_every_expired_lease_in_batches(
    launch, no_enqueue, empty_queues, monkeypatch
):
    monkeypatch.setattr(lease, "SWEEP_BATCH", 50)
    gone = timezone.now() - timedelta(minutes=5)
    ids = many(
        launch,
        170,
        status=Run.Status.RUNNING,
        lease_owner="dead",
        lease_expires_at=gone,
        updated_at=gone - timedelta(minutes=1),
    )
    no_enqueue.clear()
    assert engine.sweep() == 170  # was 500 at most a sweep: 2 000 runs a minute
    assert sorted(no_enqueue) == sorted(ids)
    no_enqueue.clear()
    assert engine.sweep() == 0  # each has its message now: not sent again


def test_a_backlog_is_not_taken_for_lost_messages(launch, no_enqueue, a_backlog):
    long_ago = timezone.now() - timedelta(minutes=5)
    many(launch, 30, updated_at=long_ago)  # queued 5 minutes, behind a deep queue
    gone = timezone.now() - timedelta(minutes=1)
    Run.objects.filter(pk__in=Run.objects.values("pk")[:3]).update(
        status=Run.Status.RUNNING,
        lease_owner="dead",
        lease_expires_at=gone,
        updated_at=gone - timedelta(seconds=30),
    )
    no_enqueue.clear()
    # The three dead workers' runs only; the 27 queued ones wait for their turn.
    assert engine.sweep() == 3 and len(no_enqueue) == 3
    # The next sweep, still behind the backlog, sends nothing.
    assert engine.sweep(now=timezone.now() + timedelta(minutes=10)) == 0


def test_an_enqueue_the_broker_refuses_marks_the_run_unsent(launch, monkeypatch, no_enqueue):
    from kombu.exceptions import OperationalError

    run = launch()
    monkeypatch.undo()  # the real enqueue, with a broker that refuses the message

    def refused(*args, **kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(celery_app.tasks[queue.ADVANCE_TASK], "apply_async", refused)
    assert queue.enqueue(run.pk, agent=run.agent) is False
    assert Run.objects.get(pk=run.pk).unsent


def test_a_failed_enqueue_marks_the_run_unsent(launch, a_backlog, monkeypatch, no_enqueue):
    run = launch()
    Run.objects.filter(pk=run.pk).update(updated_at=timezone.now() - timedelta(minutes=5))
    queue._mark_unsent(run.pk)  # what enqueue does when the broker refuses the message
    other = launch()
    Run.objects.filter(pk=other.pk).update(updated_at=timezone.now() - timedelta(minutes=5))
    no_enqueue.clear()
    assert engine.sweep() == 1 and no_enqueue == [str(run.pk)]
    assert not Run.objects.get(pk=run.pk).unsent
    assert engine.sweep() == 0


def test_when_the_broker_lost_its_messages_every_queued_run_is_sent(launch, no_enqueue, a_backlog):
    ids = many(launch, 12)
    with celery_app.pool.acquire(block=True) as conn:
        conn.default_channel.queue_purge(queue.MARKER_QUEUE)  # what a Redis restart does
    no_enqueue.clear()
    assert engine.sweep() == 12 and sorted(no_enqueue) == sorted(ids)
    assert engine.sweep() == 0  # the marker is back
