"""The API's idempotency records (agentops/idempotency.py): the first answer to a
state-changing request sent with an `Idempotency-Key`, kept for the window so that a retry
gets it again instead of doing the work twice."""

from django.db import models
from django.http import HttpResponse


class IdempotentRequest(models.Model):
    """One key of one principal for one method and path. The unique constraint is what keeps
    two concurrent requests with the same key from both running (web processes share nothing
    else); `status` is null only while an async view holds the key (`locked_until`)."""

    principal = models.CharField(max_length=100, help_text="Who sent it: 'accounts.user:7'.")
    method = models.CharField(max_length=8)
    path = models.CharField(max_length=400)
    key = models.CharField(max_length=128)
    # sha256 of the query string and the body (JSON in one spelling): another request under
    # the same key is refused, never answered with this one's answer.
    fingerprint = models.CharField(max_length=64)
    status = models.PositiveSmallIntegerField(null=True, blank=True)
    content_type = models.CharField(max_length=100, blank=True)
    location = models.CharField(max_length=400, blank=True)
    body = models.BinaryField(default=b"")
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    locked_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["principal", "method", "path", "key"], name="idempotent_request_unique"
            )
        ]
        indexes = [models.Index(fields=["expires_at"], name="idempotent_request_expiry_idx")]

    def __str__(self) -> str:
        return f"{self.principal} {self.method} {self.path} [{self.key}]"

    def replay(self) -> HttpResponse:
        """The stored answer again, marked as a replay."""
        response = HttpResponse(
            bytes(self.body), status=self.status, content_type=self.content_type or None
        )
        if self.location:
            response["Location"] = self.location
        response["Idempotent-Replayed"] = "true"
        return response
