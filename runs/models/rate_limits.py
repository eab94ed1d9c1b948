"""The rate limits' rows: a scope to lock, the uses a window counts, a run waiting for room
(the work is runs/rate_limits.py's)."""

from django.db import models

from .run import Run


class RateLimitScope(models.Model):
    """One row per rate limit scope ("tool:send_email", "agent:refund-desk:send_email"):
    what every worker locks before it counts the scope's uses (runs/rate_limits.py), so two
    workers never both take the last slot."""

    scope = models.CharField(max_length=200, primary_key=True)

    def __str__(self) -> str:
        return self.scope


class RateLimitUse(models.Model):
    """A call that ran under a rate limit: a scope's sliding window counts these."""

    scope = models.CharField(max_length=200)
    # The call's idempotency key: a call resumed after a crash, or retried, counts once.
    key = models.CharField(max_length=64)
    # Kept when the run is deleted: deleting runs must not give the limit back.
    run = models.ForeignKey(Run, null=True, on_delete=models.SET_NULL, related_name="+")
    tool = models.CharField(max_length=64)
    at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["scope", "at"], name="rate_limit_use_window_idx")]
        constraints = [
            models.UniqueConstraint(fields=["scope", "key"], name="rate_limit_use_once_per_call")
        ]

    def __str__(self) -> str:
        return f"{self.scope} {self.key[:12]} at {self.at:%H:%M:%S}"


class RateLimitWait(models.Model):
    """A run waiting (without a worker) for a rate limit's window to have room; the sweep
    resumes it once `until` has passed (runs/rate_limits.py)."""

    run = models.OneToOneField(Run, primary_key=True, on_delete=models.CASCADE, related_name="+")
    tool = models.CharField(max_length=64)
    scope = models.CharField(max_length=200)
    until = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"{self.run_id} waits for {self.scope} until {self.until:%H:%M:%S}"
