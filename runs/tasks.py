"""The runs' Celery tasks: thin, ids in, the engine does the work."""

from celery import shared_task
from django.db import InterfaceError, OperationalError

from . import chains, engine, pending, rate_limits

# A database that is restarting or unreachable: the message is sent again with backoff and
# jitter (up to 2, 4 ... 64 s), not lost. The sweep stays the safety net for whatever else
# kills a task (a worker's crash, a lost message).
_DATABASE_DOWN = {
    "autoretry_for": (OperationalError, InterfaceError),
    "retry_backoff": 2,
    "retry_backoff_max": 64,
    "retry_jitter": True,
    "max_retries": 12,
}


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True, **_DATABASE_DOWN)
def advance_run(run_id: str) -> str:
    return engine.advance(run_id)


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True, **_DATABASE_DOWN)
def launch_follow_ups(run_id: str) -> int:
    return len(chains.launch_follow_ups(run_id))


@shared_task(ignore_result=True)
def sweep() -> int:
    """Runs whose lease expired or whose message was lost, lost follow-ups, pending
    operations past their deadline or due for a poll, and runs whose rate limit wait is
    over."""
    return engine.sweep() + chains.sweep() + pending.sweep() + rate_limits.sweep()
