"""The triggers' Celery task, sent by `celery beat` (CELERY_BEAT_SCHEDULE): thin."""

from celery import shared_task

from . import scheduler


@shared_task(ignore_result=True)
def launch_due_schedules() -> int:
    return scheduler.launch_due_schedules()
