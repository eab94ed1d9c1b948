"""The Run model: its fields, constraints and what a list shows of it. Its behaviour is in
its parts (run_status.py, run_resume.py, timeline.py, limits.py), its queries in queries.py."""

import uuid
from decimal import Decimal
from typing import TypeAlias

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from agentkit import tracing

from .. import trace_links
from . import choices
from .limits import RunLimits
from .queries import RunQuerySet
from .run_resume import RunResumption
from .run_status import RunStatusChanges


class Run(RunStatusChanges, RunResumption, RunLimits, models.Model):
    """An agent's run: its launch (agent, config snapshot, input, trigger), limits, counters
    and status. What it does lives in its parts: status changes (run_status.py), going back
    to work (run_resume.py), both through the timeline's writes (timeline.py), and time used
    (limits.py); `Run.objects` is queries.py's."""

    Status: TypeAlias = choices.Status
    Trigger: TypeAlias = choices.Trigger
    Termination: TypeAlias = choices.Termination
    TRANSITIONS = choices.TRANSITIONS
    ACTIVE_STATUSES = choices.ACTIVE_STATUSES
    TERMINAL_STATUSES = choices.TERMINAL_STATUSES

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.SlugField(max_length=64)
    agent_config = models.JSONField(help_text="Snapshot of the agent's config at launch.")
    provider = models.CharField(max_length=32, help_text="scripted or anthropic")
    input = models.JSONField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    status_detail = models.CharField(max_length=500, blank=True)
    termination_reason = models.CharField(max_length=32, choices=Termination.choices, blank=True)
    output = models.TextField(blank=True)
    trigger = models.CharField(max_length=16, choices=Trigger.choices, default=Trigger.API)
    # Who or what pulled the trigger, beyond launched_by: "token ci-bot", "delivery 5f2c…",
    # "schedule 3 nightly-report", "run <uuid>", "checkpoint <uuid>@12".
    source = models.CharField(max_length=200, blank=True)
    # The run this one follows (chained) or was forked or replayed from.
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children"
    )
    # No foreign key in the database: the checkpoints are partitioned on Postgres (0028), and
    # a key to a partitioned table must hold the partition key. An archived source run's
    # checkpoint leaves the id behind (runs/retention/).
    forked_from = models.ForeignKey(
        "runs.Checkpoint",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_constraint=False,
    )
    launched_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )

    max_steps = models.PositiveIntegerField()
    max_cost_usd = models.DecimalField(max_digits=10, decimal_places=4)
    max_seconds = models.PositiveIntegerField()
    max_consecutive_errors = models.PositiveIntegerField()

    step_count = models.PositiveIntegerField(default=0, help_text="Model calls made.")
    error_count = models.PositiveIntegerField(default=0)
    consecutive_errors = models.PositiveIntegerField(default=0)
    retry_count = models.PositiveIntegerField(default=0)
    tokens_in = models.PositiveBigIntegerField(default=0)
    tokens_out = models.PositiveBigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=Decimal(0))

    # What happened, countable in a list without reading the timeline: each is moved on in
    # the same UPDATE as the step that records it (a decision, an expiry, a tool step), so
    # keeping them costs no statement of its own. `approved` leaves out edited approvals.
    approved_count = models.PositiveIntegerField(default=0)
    edited_count = models.PositiveIntegerField(default=0)
    rejected_count = models.PositiveIntegerField(default=0)
    answered_count = models.PositiveIntegerField(default=0)
    expired_count = models.PositiveIntegerField(default=0)
    tool_failed_count = models.PositiveIntegerField(
        default=0, help_text="Tool calls that failed (not the ones a person rejected)."
    )
    # One line that tells this run from its neighbours in a list (Agent.summarize, at launch).
    input_summary = models.CharField(max_length=200, blank=True)
    # Time parked in `waiting` before the current wait, and when the current wait began:
    # max_seconds is working time, a person's time to decide is left out (working_seconds).
    seconds_waited = models.FloatField(default=0)
    waiting_since = models.DateTimeField(null=True, blank=True)
    # An operator's pause (runs/steering/models.py): asked for, then taken at the run's next step
    # boundary, where the engine parks it (paused_at) and frees its worker; cleared by Resume.
    pause_requested_at = models.DateTimeField(null=True, blank=True)
    pause_requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    paused_at = models.DateTimeField(null=True, blank=True)
    # OpenTelemetry (agentkit/tracing.py): the run span's W3C traceparent, chosen at launch so
    # every later span of the run is its child, then ";" and its parent's (the launching
    # request's, an external agent's). Empty when tracing was off at launch.
    traceparent = models.CharField(max_length=120, blank=True, default="")

    last_seq = models.PositiveIntegerField(default=0)
    last_hash = models.CharField(max_length=64, blank=True)
    version = models.PositiveIntegerField(default=0)
    lease_owner = models.CharField(max_length=100, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # Queued, but its message could not be sent (the broker was unreachable): the sweep sends
    # it. Runs whose message the broker lost are found by runs/queue.py's marker instead.
    unsent = models.BooleanField(default=False)
    # When the sweep last sent it again since it was last claimed: a run whose lease expired
    # and that was re-sent has its message, and waits in the queue like any other.
    resent_at = models.DateTimeField(null=True, blank=True)

    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["status", "-created_at"]),
            models.Index(fields=["agent", "-created_at"]),
            models.Index(fields=["trigger", "-created_at"]),
            models.Index(fields=["launched_by", "-created_at"]),
            models.Index(fields=["-created_at"]),
            # The dashboard's runs in flight and recent failures: small partial indexes read
            # in order, instead of sorting every failed run or filtering the newest runs.
            # Their keys and conditions are columns indexed above: no HOT update is lost.
            models.Index(
                fields=["-created_at"],
                condition=Q(status__in=["queued", "running", "waiting"]),
                name="runs_run_active_idx",
            ),
            models.Index(
                fields=["-finished_at", "-created_at"],
                condition=Q(status="failed"),
                name="runs_run_failed_idx",
            ),
            # No index may hold a column every step writes (lease_expires_at, counters):
            # Postgres can then update the row in place (HOT) instead of adding an entry to
            # each index per step. The sweep finds running runs through (status, created_at).
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=choices.CHECK_STATUSES), name="run_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(trigger__in=choices.CHECK_TRIGGERS), name="run_trigger_valid"
            ),
            models.CheckConstraint(
                condition=Q(termination_reason="")
                | Q(termination_reason__in=choices.CHECK_TERMINATIONS),
                name="run_termination_valid",
            ),
            # A finished run always says why it finished.
            models.CheckConstraint(
                condition=~Q(status__in=["succeeded", "failed", "cancelled"])
                | ~Q(termination_reason=""),
                name="run_terminal_has_reason",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.agent} {self.id} ({self.status})"

    @property
    def is_scripted(self) -> bool:
        return self.provider == "scripted"

    @property
    def trace_id(self) -> str:
        """The run's OpenTelemetry trace id (32 hex digits), "" when launched untraced."""
        return tracing.trace_id_of(self.traceparent)

    @property
    def trace_url(self) -> str:
        """The trace's page in the tracing back end (AGENTOPS_TRACE_URL), or ""."""
        return trace_links.url_for(self.trace_id)

    # (counter, how a badge says it), in the order badges are shown: the worst first.
    OUTCOME_BADGES = (
        ("tool_failed_count", "tool failed"),
        ("rejected_count", "rejected"),
        ("expired_count", "expired"),
        ("edited_count", "edited"),
        ("answered_count", "answered"),
    )

    @property
    def outcome_badges(self) -> list[tuple[str, str]]:
        """("rejected", "1 rejected")-style badges for what people and tools did in the run,
        from the counters alone (no query): a succeeded run whose refund was rejected says so."""
        badges = []
        for name, label in self.OUTCOME_BADGES:
            n = getattr(self, name)
            if n:
                badges.append((name.removesuffix("_count").replace("_", "-"), f"{n} {label}"))
        return badges


# Every column of a run, its id included (generated here, not by the database).
RUN_COLUMNS = tuple(f.name for f in Run._meta.concrete_fields)
