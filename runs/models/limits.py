"""What a run has used of its limits in time: elapsed, waited for people, worked (what
max_seconds limits); and how soon a queued run's lost message is sent again. Part of `Run`
(run.py); reads settings, writes nothing."""

from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.utils import timezone


def queued_resend_seconds() -> float:
    """AGENTOPS_QUEUED_RESEND_SECONDS, by default half the lease: a queued run whose message
    was lost is sent again within that plus one sweep, well inside two leases."""
    cfg = settings.AGENTOPS
    return float(cfg.get("QUEUED_RESEND_SECONDS") or cfg["LEASE_SECONDS"] / 2)


class RunLimits:
    """The time part of Run; the Run's fields it uses are declared below for the type checker
    (run.py defines them)."""

    if TYPE_CHECKING:
        started_at: Any
        finished_at: Any
        seconds_waited: float
        waiting_since: Any

    @property
    def elapsed_seconds(self) -> float:
        if not self.started_at:
            return 0.0
        end = self.finished_at or timezone.now()
        return (end - self.started_at).total_seconds()

    @property
    def waiting_seconds(self) -> float:
        """Time spent waiting for people: earlier waits and the current one so far."""
        waited = self.seconds_waited
        if self.waiting_since is not None:
            waited += ((self.finished_at or timezone.now()) - self.waiting_since).total_seconds()
        return waited

    @property
    def working_seconds(self) -> float:
        """Time the run has worked: elapsed less the time it waited for people, which is
        what max_seconds limits (the engine's rule; every gauge shows this figure)."""
        return max(0.0, self.elapsed_seconds - self.waiting_seconds)

    # (counter, how a badge says it), in the order badges are shown: the worst first.
