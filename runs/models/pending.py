"""PendingOperation: what a tool call started and its run awaits (the work is runs/pending/'s)."""

from django.db import models
from django.db.models import Q
from django.utils import timezone

from .run import Run


class PendingOperation(models.Model):
    """Something a tool call started that finishes later, which its run awaits
    (agentkit.tools.Pending; runs/pending/models.py completes, times out and reports them)."""

    class Status(models.TextChoices):
        OPEN = "open"
        COMPLETED = "completed"
        FAILED = "failed"
        TIMED_OUT = "timed_out"
        ESCALATED = "escalated"  # timed out; an operator decides (on_timeout="person")
        CANCELLED = "cancelled"  # the run ended first

    FINISHED = (Status.COMPLETED, Status.FAILED, Status.TIMED_OUT, Status.CANCELLED)

    class Completion(models.TextChoices):
        CALLBACK = "callback"
        OPERATOR = "operator"
        POLL = "poll"

    key = models.CharField(max_length=64, unique=True, help_text="The call's idempotency key.")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="pending_operations")
    tool = models.CharField(max_length=64)
    awaits = models.CharField(max_length=500)
    started_result = models.JSONField(null=True, blank=True)
    completion = models.CharField(max_length=16, choices=Completion.choices)
    poll_tool = models.CharField(max_length=64, blank=True)
    poll_args = models.JSONField(null=True, blank=True)
    poll_every_seconds = models.PositiveIntegerField(null=True, blank=True)
    next_poll_at = models.DateTimeField(null=True, blank=True)
    on_timeout = models.CharField(max_length=16, default="agent")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    deadline = models.DateTimeField()
    result = models.JSONField(null=True, blank=True)
    finished_by = models.CharField(max_length=200, blank=True)
    # The step that told the run's model how it ended; null until then.
    reported_seq = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            # The sweep's reads: open operations past their deadline or due for a poll.
            models.Index(
                fields=["deadline"], condition=Q(status="open"), name="pending_open_deadline_idx"
            ),
            models.Index(
                fields=["next_poll_at"],
                condition=Q(status="open", completion="poll"),
                name="pending_open_poll_idx",
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(
                    status__in=[
                        "open",
                        "completed",
                        "failed",
                        "timed_out",
                        "escalated",
                        "cancelled",
                    ]
                ),
                name="pending_operation_status_valid",
            )
        ]

    def __str__(self) -> str:
        return f"{self.tool}: {self.awaits} ({self.status})"

    @property
    def is_open(self) -> bool:
        return self.status in (self.Status.OPEN, self.Status.ESCALATED)

    @property
    def overdue(self) -> bool:
        return self.is_open and self.deadline <= timezone.now()
