"""Retention and ArchivedRun: how long a timeline stays in the database, and where an archived
one went (the work is runs/retention/'s)."""

from django.db import models
from django.db.models import Q
from django.utils import timezone

from .run import Run


class Retention(models.Model):
    """How long the timelines of one agent's runs, or of one team's agents' runs, stay in the
    database before `manage.py archive` moves them to a compressed file (runs/retention/).
    A run answers to its agent's policy; without one, to the longest of its agent's teams'
    policies (a team keeps what it keeps); without any, to TIMELINE_RETENTION_DAYS."""

    # Exactly one of the two, as Budget.
    agent = models.CharField(max_length=64, blank=True)
    team = models.ForeignKey(
        "accounts.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    keep_days = models.PositiveIntegerField(
        help_text="Days a finished run's timeline stays in the database before it is archived."
    )
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["agent", "team__name"]
        constraints = [
            models.UniqueConstraint(
                fields=["agent"], condition=Q(team__isnull=True), name="retention_one_per_agent"
            ),
            models.UniqueConstraint(
                fields=["team"], condition=Q(team__isnull=False), name="retention_one_per_team"
            ),
            models.CheckConstraint(
                condition=(Q(team__isnull=True) & ~Q(agent=""))
                | (Q(team__isnull=False) & Q(agent="")),
                name="retention_agent_or_team",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.agent or self.team}: keep {self.keep_days} days"


class ArchivedRun(models.Model):
    """A run whose timeline (steps and checkpoints) was moved out of the database into an
    archive file (runs/retention/archive.py); the run's own row stays. `chain_head` is the
    hash of its last step when archived: the file's chain must end on it to verify, and the
    run page and audit view say where the timeline went instead of showing it empty."""

    run = models.OneToOneField(Run, primary_key=True, on_delete=models.CASCADE, related_name="+")
    archive = models.CharField(max_length=500, help_text="The archive file (path on the host).")
    # SHA-256 of the compressed file as written: checkpoints are not hash-chained, this
    # covers them (and every other byte).
    archive_sha256 = models.CharField(max_length=64)
    chain_head = models.CharField(max_length=64, blank=True)
    steps = models.PositiveIntegerField()
    checkpoints = models.PositiveIntegerField()
    archived_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.run_id} in {self.archive}"
