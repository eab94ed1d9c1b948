"""Sending runs to workers, and asking whether runs wait for one.

The only code that talks to the broker about runs. The task is looked up by name in the Celery
app (runs/apps.py registers it), so this module, and the engine and models that call it, do
not import runs/tasks.py, which imports the engine: the dependency runs one way,
tasks -> engine -> queue. Looked up, not sent by name, so CELERY_TASK_ALWAYS_EAGER holds.
"""

import logging

from kombu.exceptions import OperationalError

from agentops.celery import app

log = logging.getLogger("agentops.engine")

ADVANCE_TASK = "runs.tasks.advance_run"
FOLLOW_UPS_TASK = "runs.tasks.launch_follow_ups"
SETTLE_TASK = "runs.tasks.settle_compensations"
AUTO_TASK = "runs.tasks.compensate_on_failure"


def enqueue(run_id, *, countdown: float | None = None) -> bool:
    """Send the run to a worker; False when the broker is unreachable.

    Called after the run's state is committed (launch, a decision, a yielded slice), so a
    broker outage must not turn a done deed into an error for the caller (a 500 on a launch
    or a decision that did happen): the run stays queued and the sweep re-sends it.
    """
    try:
        app.tasks[ADVANCE_TASK].apply_async(args=[str(run_id)], countdown=countdown)
    except OperationalError as exc:
        log.warning("run %s: not sent to a worker (%s); the sweep will re-send it", run_id, exc)
        return False
    return True


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
    broker is unreachable (runs/compensation.py's sweep sends it again)."""
    try:
        app.tasks[task].apply_async(args=[str(run_id)])
    except OperationalError as exc:
        log.warning("run %s: %s not sent (%s); the sweep will re-send it", run_id, task, exc)
        return False
    return True


def runs_waiting() -> bool:
    """Whether tasks wait in the broker's queue for a worker thread (a run yields its time
    slice only then). Unknown, with the broker unreachable, counts as yes."""
    try:
        return depth() > 0
    except Exception as exc:
        log.debug("queue length unknown (%s); yielding the slice", exc)
        return True


def depth() -> int:
    """Tasks waiting in the broker's queue for a worker (not those a worker holds, nor those
    delayed by a countdown). Raises when the broker is unreachable."""
    with app.pool.acquire(block=True, timeout=2) as conn:
        # One attempt: with the broker down the answer is "unknown", now, not after
        # kombu's reconnect loop.
        conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=1)
        # Not passive: Redis drops an empty list, and a passive declare then says
        # "no such queue" where the answer is "empty".
        queue = conn.default_channel.queue_declare(queue=app.conf.task_default_queue)
        return queue.message_count
