"""Runs waiting for a rate limit's window, resumed from outside the engine.

The limits themselves are counted by the engine (runs/engine/rate_limited.py); a run whose
call met a full window with on_limit="wait" is parked with a RateLimitWait, and `sweep`
resumes it once the window has room again.
"""

from django.db import transaction
from django.utils import timezone

from .engine import gates
from .models import RateLimitWait, Run


def sweep(now=None) -> int:
    """Resume the runs whose rate limit wait is over (they try again; a window that filled
    up meanwhile makes them wait again). Run by beat and the embedded sweeps."""
    now = now or timezone.now()
    resumed = 0
    while True:
        # Each wait is deleted once handled: the next batch is the rest, until none is left.
        batch = list(RateLimitWait.objects.filter(until__lte=now).order_by("until")[:SWEEP_BATCH])
        for wait in batch:
            with transaction.atomic():
                run = Run.locked(wait.run_id)  # the order every writer takes: run, then rows
                RateLimitWait.objects.filter(pk=wait.pk).delete()
                if run.status == Run.Status.WAITING and not gates.current().pending_count(run):
                    resumed += run.resume(f"the rate limit of {wait.tool} has room again")
        if len(batch) < SWEEP_BATCH:
            return resumed


SWEEP_BATCH = 200
