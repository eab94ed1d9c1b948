"""The regression run's Celery task: thin, an id in, evals/rehearsal.py does the work."""

from celery import shared_task

from .models import RegressionRun
from .rehearsal import execute


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_regression(regression_id: int) -> None:
    regression = RegressionRun.objects.filter(pk=regression_id).first()
    if regression is not None:
        execute(regression)
