from celery import shared_task

from . import engine


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def advance_run(run_id: str) -> str:
    return engine.advance(run_id)


@shared_task(ignore_result=True)
def sweep() -> int:
    return engine.sweep()
