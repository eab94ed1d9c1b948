"""The embedded topology's background machinery: a Celery worker and the periodic sweeps,
running as threads inside the web process (`manage.py up`).

In production these are separate processes (`celery -A agentops worker`, `celery -A agentops
beat`). Embedded, the broker is kombu's memory transport, whose queues are process-global,
so the web process's `apply_async` and this worker meet in the same queue.
"""

import logging
import socket
import threading
from dataclasses import dataclass, field

from celery import Celery
from celery.worker import WorkController, state
from django.conf import settings
from django.db import connections

from agentops import idempotency
from agentops.celery import app as default_app
from approvals import decisions
from approvals import tasks as approval_tasks
from gateway import tasks as gateway_tasks
from runs import chains, engine, queue, rate_limits
from runs import tasks as run_tasks
from runs.engine import in_flight
from runs.models import Run
from runs.pending import models as pending
from triggers import scheduler

log = logging.getLogger("agentops.embedded")

SWEEP_INTERVAL_SECONDS = 15.0

# Module-level on purpose: a worker nobody references is garbage-collected with its
# consumer and the queue silently stops being served.
_running: "Embedded | None" = None


@dataclass
class Embedded:
    worker: WorkController
    worker_thread: threading.Thread
    sweeps: "Sweeps"
    concurrency: int
    stopped: bool = field(default=False)


def start(*, concurrency: int, sweep_interval: float | None = None) -> Embedded:
    """Start the worker (returns once it consumes) and the sweeps. Idempotent."""
    global _running
    if _running is not None and not _running.stopped:
        return _running
    if settings.EMBEDDED:
        recover_lost_messages()
    in_flight.reopen()  # a worker stopped earlier in this process closed it (stop below)
    worker, thread = start_worker(concurrency=concurrency)
    sweeps = Sweeps(interval=sweep_interval or min(SWEEP_INTERVAL_SECONDS, settings.SWEEP_SECONDS))
    sweeps.start()
    _running = Embedded(worker=worker, worker_thread=thread, sweeps=sweeps, concurrency=concurrency)
    return _running


def stop(*, grace: float = 5.0) -> bool:
    """Warm shutdown: running tasks finish their time slice. False if they did not within
    `grace` seconds; the caller may then exit anyway, since every run's state is in the
    database and the sweep resumes it after its lease expires."""
    global _running
    running = _running
    if running is None or running.stopped:
        return True
    running.sweeps.stop_event.set()
    # Runs whose model calls still wait go back to the queue (the next start finds them
    # queued), as a Celery worker's shutting down hands them back (runs/tasks.py).
    in_flight.release_all(timeout=grace)
    # What the worker's own SIGTERM handler does: the consumer loop checks this flag and
    # shuts the worker down from its own thread (calling worker.stop() from here would race
    # with the loop that is still draining the connection).
    state.should_stop = 0  # type: ignore[assignment]  # typed None in celery-types; a flag
    running.worker_thread.join(grace)
    running.sweeps.join(1.0)
    done = not running.worker_thread.is_alive()
    if done:
        state.should_stop = None
        running.stopped = True
        _running = None
    return done


def start_worker(
    *, concurrency: int, app: Celery | None = None
) -> tuple[WorkController, threading.Thread]:
    app = app or default_app
    app.finalize()
    ready = threading.Event()

    class Worker(app.WorkController):  # type: ignore[name-defined]
        def on_consumer_ready(self, consumer) -> None:
            ready.set()

    worker = Worker(
        app=app,
        hostname=f"embedded@{socket.gethostname()}",
        pool="threads",
        concurrency=concurrency,
        loglevel="WARNING",
        # One process: nothing to synchronise with or to announce to.
        without_heartbeat=True,
        without_mingle=True,
        without_gossip=True,
    )
    thread = threading.Thread(target=worker.start, name="embedded-celery-worker", daemon=True)
    thread.start()
    if not ready.wait(30):
        raise RuntimeError("the embedded Celery worker did not start within 30 s")
    return worker, thread


def recover_lost_messages() -> int:
    """Embedded only: the memory transport's queue died with the previous process, so every
    queued run lost its message. (Runs left `running` resume when their lease expires.)"""
    try:
        queue.broker_lost_messages()  # the new broker's marker: the sweep's look finds it
        queued = Run.objects.filter(status=Run.Status.QUEUED).values_list("pk", "agent")
        for run_id, agent in queued:
            queue.enqueue(run_id, agent=agent)
        return len(queued)
    finally:
        connections.close_all()


class Sweeps(threading.Thread):
    """What `celery beat` schedules in production: lease sweep (lost follow-ups with it),
    approval expiry, the schedules that are due (triggers/scheduler.py) and the API's
    idempotency keys past their window."""

    def __init__(self, *, interval: float) -> None:
        super().__init__(name="embedded-sweeps", daemon=True)
        self.interval = interval
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.wait(self.interval):
            self.sweep_once()

    def sweep_once(self) -> None:
        try:
            # Fast connection checkouts, tried again: after a Postgres restart the sweep is
            # what brings runs back, and must not sit 30 s on a pool that cannot connect.
            run_tasks.sweep_all(self._sweep)
        except Exception:
            log.exception("embedded sweep failed")
        finally:
            # This thread is not a request: give back its connection between sweeps.
            connections.close_all()

    @staticmethod
    def _sweep() -> int:
        requeued = engine.sweep()
        if requeued:
            log.info("sweep re-enqueued %d run(s)", requeued)
        expired = decisions.expire_due()
        if expired:
            log.info("expired %d approval(s)", expired)
        escalated = approval_tasks.escalate_approvals()
        if escalated:
            log.info("escalated %d approval(s)", escalated)
        chains.sweep()
        pending.sweep()
        rate_limits.sweep()
        gateway_tasks.sweep_sessions_once()
        launched = scheduler.launch_due_schedules()
        if launched:
            log.info("launched %d scheduled run(s)", launched)
        idempotency.prune()
        return requeued
