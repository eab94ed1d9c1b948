"""The side-effect ledger (SideEffect: intent before a call, outcome after) and the requests to
undo a committed effect (Compensation; the work is runs/compensation/'s)."""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from .run import Run


class SideEffect(models.Model):
    """The idempotency ledger: intent before a side-effecting call, outcome after."""

    class Status(models.TextChoices):
        INTENT = "intent"
        COMMITTED = "committed"
        FAILED = "failed"
        UNKNOWN = "unknown"

    key = models.CharField(max_length=64, unique=True)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="side_effects")
    step_seq = models.PositiveIntegerField(help_text="Seq of the model step that asked for it.")
    tool = models.CharField(max_length=64)
    args = models.JSONField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.INTENT)
    result = models.JSONField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["intent", "committed", "failed", "unknown"]),
                name="side_effect_status_valid",
            )
        ]

    def __str__(self) -> str:
        return f"{self.tool} {self.key[:12]} ({self.status})"


class Compensation(models.Model):
    """A request to undo one committed effect of a failed or cancelled run (its tool's
    declared Compensate), and what became of it (runs/compensation/models.py). The compensating
    call runs in a compensation run (`compensating_run`), gated like any call, under a
    ledger key derived from the effect's (`key`): it happens at most once per attempt."""

    class Status(models.TextChoices):
        PENDING = "pending"  # requested; its compensation run has not ended
        COMPENSATED = "compensated"  # the compensating call committed
        FAILED = "failed"  # not made: rejected, failed, expired, or its run cancelled

    effect = models.ForeignKey(SideEffect, on_delete=models.CASCADE, related_name="compensations")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="compensations")
    compensating_run = models.ForeignKey(
        Run, null=True, on_delete=models.SET_NULL, related_name="compensating"
    )
    tool = models.CharField(max_length=64)
    args = models.JSONField()
    key = models.CharField(max_length=64, unique=True, help_text="The compensating call's key.")
    attempt = models.PositiveIntegerField(default=1)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Requested by the agent's declaration (compensate_on_failure), not by a person.
    automatic = models.BooleanField(default=False)
    result = models.JSONField(null=True, blank=True)
    detail = models.CharField(max_length=1000, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    settled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["pending", "compensated", "failed"]),
                name="compensation_status_valid",
            ),
            # One under way or made per effect: a second request is refused, never run twice.
            models.UniqueConstraint(
                fields=["effect"],
                condition=Q(status__in=["pending", "compensated"]),
                name="compensation_once_per_effect",
            ),
        ]
        indexes = [
            models.Index(
                fields=["created_at"],
                condition=Q(status="pending"),
                name="compensation_pending_idx",
            )
        ]

    def __str__(self) -> str:
        return f"{self.tool} for effect {self.effect_id} ({self.status})"
