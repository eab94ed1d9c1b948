"""The project's own periodic task, sent by `celery beat` (CELERY_BEAT_SCHEDULE): thin."""

from celery import shared_task

from . import idempotency


@shared_task(ignore_result=True)
def prune_idempotency_keys() -> int:
    return idempotency.prune()
