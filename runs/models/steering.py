"""An operator steering a run: Instruction (text for the agent's next turn) and Recovery (the
choice after a failed call); the work is runs/steering/'s."""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from .run import Run


class Instruction(models.Model):
    """An operator's instruction to a run's agent (runs/steering/models.py): the agent receives it
    as a user-role text at its next model turn, when the engine records it as an `operator`
    step (delivered_seq) in the same write; until then it waits here. `key` is the client's
    idempotency key: a retried POST finds the instruction it made instead of adding one."""

    MAX_CHARS = 4000

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="instructions")
    text = models.TextField()
    by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    key = models.CharField(max_length=100)
    # "operator" (typed on the run page or posted to the API) or "recovery" (the choice made
    # after a failed step: the agent is told the failure and this instead).
    source = models.CharField(max_length=16, default="operator")
    created_at = models.DateTimeField(default=timezone.now)
    delivered_seq = models.PositiveIntegerField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "key"], name="instruction_key_unique_per_run")
        ]
        indexes = [
            models.Index(
                fields=["run"],
                condition=Q(delivered_seq__isnull=True),
                name="instruction_undelivered_idx",
            )
        ]

    def __str__(self) -> str:
        return f"{self.run_id} instruction {self.key}"

    @property
    def shown_text(self) -> str:
        """The text as pages and the API show it: under the agent's PII policy, masked as the
        timeline keeps it (the agent gets it as typed, as it gets the run's input)."""
        return self.run.masked(self.text)


class Recovery(models.Model):
    """A failed tool call of an agent declared on_failure="ask", held from the agent until an
    operator chooses (runs/steering/models.py): retry it (maybe with edited arguments, gated again),
    skip it with a note the agent gets as the call's result, or tell the agent the failure
    with another instruction. The engine applies the choice when the run is resumed."""

    class Status(models.TextChoices):
        OPEN = "open"
        DECIDED = "decided"
        CANCELLED = "cancelled"  # the run ended first

    class Choice(models.TextChoices):
        RETRY = "retry"
        SKIP = "skip"
        INSTRUCT = "instruct"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="recoveries")
    failed_seq = models.PositiveIntegerField(help_text="The failed tool step.")
    tool = models.CharField(max_length=64)
    tool_use_id = models.CharField(max_length=100)
    args = models.JSONField()
    error = models.TextField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    choice = models.CharField(max_length=16, choices=Choice.choices, blank=True)
    edited_args = models.JSONField(null=True, blank=True)
    note = models.TextField(blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["run"], condition=Q(status="open"), name="recovery_one_open_per_run"
            ),
            models.CheckConstraint(
                condition=Q(status__in=["open", "decided", "cancelled"]),
                name="recovery_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(choice__in=["", "retry", "skip", "instruct"]),
                name="recovery_choice_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.failed_seq} {self.tool} ({self.status})"
