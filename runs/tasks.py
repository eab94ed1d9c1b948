"""The runs' Celery tasks: thin, ids in, the engine does the work."""

import logging
import time
from typing import TypedDict

from celery import shared_task
from celery.signals import worker_shutting_down
from django.db import InterfaceError, OperationalError, connections
from django.utils import timezone

from agentkit.database import fail_fast

from . import chains, engine, rate_limits
from .compensation import models as compensation
from .engine import in_flight
from .pending import models as pending
from .retention import partitions

log = logging.getLogger("agentops.engine")
# The sweep's own attempts while the database is unreachable: each waits at most
# SWEEP_CHECKOUT_SECONDS for a connection (not the pool's 30 s), then tries again after
# SWEEP_RETRY_SECONDS, SWEEP_ATTEMPTS times in all: about one sweep interval (15 s).
SWEEP_CHECKOUT_SECONDS = 2.0
SWEEP_RETRY_SECONDS = 1.0
SWEEP_ATTEMPTS = 5


# A database that is restarting or unreachable: the message is sent again with backoff and
# jitter (up to 2, 4 ... 64 s), not lost. The sweep stays the safety net for whatever else
# kills a task (a worker's crash, a lost message).
class _RetryOptions(TypedDict):
    autoretry_for: tuple[type[BaseException], ...]
    retry_backoff: int
    retry_backoff_max: int
    retry_jitter: bool
    max_retries: int


_DATABASE_DOWN: _RetryOptions = {
    "autoretry_for": (OperationalError, InterfaceError),
    "retry_backoff": 2,
    "retry_backoff_max": 64,
    "retry_jitter": True,
    "max_retries": 12,
}


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True, **_DATABASE_DOWN)
def advance_run(run_id: str) -> str:
    # A worker's model calls are awaited on its process's loop (engine/in_flight.py); run
    # inline (eager), the caller expects the run advanced when the task returns.
    return engine.advance(run_id, calls_in_flight=not advance_run.request.is_eager)


@worker_shutting_down.connect
def hand_back_calls_in_flight(**kwargs) -> None:
    """Runs whose model call this worker awaits go back to the queue now (another worker
    asks again at once), not when their leases expire."""
    in_flight.release_all()


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True, **_DATABASE_DOWN)
def launch_follow_ups(run_id: str) -> int:
    return len(chains.launch_follow_ups(run_id))


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True, **_DATABASE_DOWN)
def settle_compensations(run_id: str) -> int:
    return len(compensation.settle(run_id))


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True, **_DATABASE_DOWN)
def compensate_on_failure(run_id: str) -> int:
    return len(compensation.compensate_automatically(run_id))


@shared_task(ignore_result=True)
def sweep() -> int:
    """Runs whose lease expired or whose message was lost, lost follow-ups, pending
    operations past their deadline or due for a poll, runs whose rate limit wait is over,
    and compensations whose message was lost. While the database is unreachable it fails
    fast and tries again (sweep_all)."""
    return sweep_all(
        lambda: (
            engine.sweep()
            + chains.sweep()
            + pending.sweep()
            + rate_limits.sweep()
            + compensation.sweep()
        )
    )


def sweep_all(work, *, attempts: int | None = None) -> int:
    """`work()` with fast connection checkouts, tried again on a database error: after a
    Postgres restart the first attempts meet a pool still reconnecting. Raises the last
    error when every attempt failed (beat sends the next sweep anyway)."""
    attempts = attempts or SWEEP_ATTEMPTS
    for attempt in range(1, attempts + 1):
        try:
            with fail_fast(SWEEP_CHECKOUT_SECONDS):
                return work()
        except (OperationalError, InterfaceError) as exc:
            # A dead connection must not be handed to the next attempt.
            connections.close_all()
            if attempt == attempts:
                raise
            log.warning("sweep attempt %d failed (%s); trying again", attempt, exc)
            time.sleep(SWEEP_RETRY_SECONDS)
    return 0


@shared_task(ignore_result=True, **_DATABASE_DOWN)
def make_timeline_partitions() -> int:
    """This month's timeline partitions and TIMELINE_PARTITIONS_AHEAD months' more (Postgres;
    nothing elsewhere): a run is never created in a month without its partition."""
    return len(partitions.ensure_ahead(now=timezone.now()))
