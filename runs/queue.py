"""Sending runs to workers, and asking whether runs wait for one: the only code that talks to
the broker about runs. Imports no runs/tasks.py (it imports the engine): the task is looked
up by name in the Celery app.
Why and how: docs/design/modules.md."""

import logging
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.apps import apps
from django.conf import settings
from kombu import Connection, Queue
from kombu.exceptions import OperationalError

from agentops.celery import app

log = logging.getLogger("agentops.engine")

ADVANCE_TASK = "runs.tasks.advance_run"
FOLLOW_UPS_TASK = "runs.tasks.launch_follow_ups"
SETTLE_TASK = "runs.tasks.settle_compensations"
AUTO_TASK = "runs.tasks.compensate_on_failure"

PEOPLE_QUEUE = "people"
SWEEPS_QUEUE = "sweeps"
RUNS_QUEUE = "runs"
# Holds one message nobody consumes: when the broker loses its data (a Redis restart without
# persistence, a failover to a replica behind), the marker goes with every run's message.
MARKER_QUEUE = "agentops.broker-marker"


def run_queues() -> list[str]:
    """The run queues: `runs`, then `runs.1` ... `runs.N-1`."""
    count = max(1, int(settings.AGENTOPS.get("RUN_QUEUES") or 1))
    return [RUNS_QUEUE, *(f"{RUNS_QUEUE}.{n}" for n in range(1, count))]


def run_queue(agent: str) -> str:
    """The queue of an agent's runs: a stable hash, the same in every process."""
    queues = run_queues()
    return queues[zlib.crc32(agent.encode()) % len(queues)] if agent else queues[0]


def enqueue(
    run_id, *, agent: str = "", countdown: float | None = None, for_a_person: bool = False
) -> bool:
    """Send the run to a worker; False when the broker is unreachable.

    Called after the run's state is committed (launch, a decision, a yielded slice), so a
    broker outage must not turn a done deed into an error for the caller (a 500 on a launch
    or a decision that did happen): the run stays queued, marked unsent, and the sweep
    re-sends it. `for_a_person`: a person's decision resumed it, so it goes to the people
    queue, ahead of any backlog of runs.
    """
    queue = PEOPLE_QUEUE if for_a_person else run_queue(agent)
    try:
        app.tasks[ADVANCE_TASK].apply_async(args=[str(run_id)], countdown=countdown, queue=queue)
    except OperationalError as exc:
        log.warning("run %s: not sent to a worker (%s); the sweep will re-send it", run_id, exc)
        _mark_unsent(run_id)
        return False
    return True


def _mark_unsent(run_id) -> None:
    # By name: runs/models/ (run_resume.py) imports this module.
    Run = apps.get_model("runs", "Run")
    try:
        Run.objects.filter(pk=run_id, status="queued").update(unsent=True)
    except Exception as exc:  # the database may be what is down; the sweep's age rule remains
        log.warning("run %s: could not be marked unsent (%s)", run_id, exc)


def send_follow_ups(run_id) -> bool:
    """Send a succeeded run's follow-ups to a worker (runs/chains.py), after its success is
    committed; False when the broker is unreachable (the chains' sweep sends it again)."""
    try:
        app.tasks[FOLLOW_UPS_TASK].apply_async(args=[str(run_id)])
    except OperationalError as exc:
        log.warning("run %s: follow-ups not sent (%s); the sweep will re-send them", run_id, exc)
        return False
    return True


def send_compensation(task: str, run_id) -> bool:
    """Send a compensation task (SETTLE_TASK: an ended compensation run; AUTO_TASK: a run
    whose agent compensates on failure) after the run's end is committed; False when the
    broker is unreachable (runs/compensation/models.py's sweep sends it again)."""
    try:
        app.tasks[task].apply_async(args=[str(run_id)])
    except OperationalError as exc:
        log.warning("run %s: %s not sent (%s); the sweep will re-send it", run_id, task, exc)
        return False
    return True


def runs_waiting() -> bool:
    """Whether tasks wait in the run queues for a worker thread (a run yields its time slice
    only then). Unknown, with the broker unreachable, counts as yes."""
    try:
        return depth() > 0
    except Exception as exc:
        log.debug("queue length unknown (%s); yielding the slice", exc)
        return True


def depth() -> int:
    """Run tasks waiting in the broker's run queues for a worker (not those a worker holds,
    nor those delayed by a countdown). Raises when the broker is unreachable."""
    with _broker() as conn:
        return sum(_count(conn, name) for name in run_queues())


def broker_lost_messages() -> bool:
    """Whether the broker lost what it held: its marker message is gone (then put back). A
    new broker has none either, and rightly says yes: the runs queued in the database have no
    message in it. Raises when the broker is unreachable."""
    with _broker() as conn:
        if _count(conn, MARKER_QUEUE):
            return False
        conn.Producer().publish(
            "marker", routing_key=MARKER_QUEUE, declare=[Queue(MARKER_QUEUE)], retry=False
        )
        return True


@contextmanager
def _broker() -> Iterator[Any]:  # a kombu Connection (celery-types says Producer)
    with app.pool.acquire(block=True, timeout=2) as conn:
        # One attempt: with the broker down the answer is "unknown", now, not after kombu's
        # reconnect loop.
        conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=1)
        yield conn


def _count(conn: Connection, name: str) -> int:
    # Not passive: Redis drops an empty list, and a passive declare then says "no such queue"
    # where the answer is "empty".
    return conn.default_channel.queue_declare(queue=name).message_count
