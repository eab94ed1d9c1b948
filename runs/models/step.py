"""The timeline's rows: Step (one hash-chained entry of a run's timeline) and Checkpoint (the
engine's state after a step). Written by the run's own methods (timeline.py), never by hand."""

import hashlib
from decimal import Decimal

from django.db import models
from django.db.models import Q
from django.utils import timezone

from .canonical import canonical_json

CHECK_STEP_KINDS = [
    "status",
    "llm",
    "llm_error",
    "tool",
    "gate",
    "decision",
    "verify",
    "summary",
    "guard",
    "pending",
    "operator",
]


class RunCreatedField(models.DateTimeField):
    """The run's created_at, copied onto every row of its timeline: Postgres partitions the
    steps and checkpoints by it (runs/retention/partitions.py), so a run's whole timeline
    lives in one partition and UNIQUE(run, seq, run_created) is as strong as UNIQUE(run, seq).
    The hot paths set it; any other write (the ORM's, runs/sql.py's) gets it from the run."""

    fills_on_insert = True

    def pre_save(self, model_instance, add):
        value = getattr(model_instance, self.attname)
        if value is None:
            value = model_instance.run.created_at
            setattr(model_instance, self.attname, value)
        return value


class Step(models.Model):
    # Set by Run._next_step: the JSON text of a field, encoded once for the hash and the insert.
    json_text: dict[str, str]

    class Kind(models.TextChoices):
        STATUS = "status"  # launched, paused, resumed, cancelled, terminated
        LLM = "llm"  # one model call and its response
        LLM_ERROR = "llm_error"  # a failed model call (retried or not)
        TOOL = "tool"  # a tool call with its result or error
        GATE = "gate"  # a gated call waiting for a human
        DECISION = "decision"  # a human decision or answer
        VERIFY = "verify"  # a verifier's check of the agent's work, passed or not
        SUMMARY = "summary"  # older turns summarised by a model call to fit the context
        GUARD = "guard"  # a guardrail's finding: invalid output, PII, a rate limit reached
        PENDING = "pending"  # an operation the run awaits: opened, completed, timed out
        OPERATOR = "operator"  # an operator steered it: an instruction, a choice after a failure

    # No index of its own: UNIQUE(run, seq)'s index serves every lookup by run.
    run = models.ForeignKey(
        "runs.Run", on_delete=models.CASCADE, related_name="steps", db_index=False
    )
    seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=Kind.choices)
    data = models.JSONField()
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=Decimal(0))
    tokens_in = models.PositiveIntegerField(default=0)
    tokens_out = models.PositiveIntegerField(default=0)
    latency_ms = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    prev_hash = models.CharField(max_length=64, blank=True)
    hash = models.CharField(max_length=64)
    # The partition key on Postgres (not part of the hash: it is the run's, not the step's).
    run_created = RunCreatedField(null=True, editable=False)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="step_seq_unique_per_run"),
            models.CheckConstraint(condition=Q(seq__gte=1), name="step_seq_positive"),
            models.CheckConstraint(condition=Q(kind__in=CHECK_STEP_KINDS), name="step_kind_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.kind}"

    def compute_hash(self, *, data_json: str | None = None) -> str:
        """The hash of the step and the one before it. `data_json`: canonical_json(data),
        when the caller made it already (it goes into the body as it is: the body is the
        canonical JSON of the object below either way)."""
        body = canonical_json(
            {
                "run": str(self.run_id),
                "seq": self.seq,
                "kind": self.kind,
                "data": self.data if data_json is None else None,
                "cost_usd": str(Decimal(self.cost_usd).normalize()),
                "created_at": self.created_at.isoformat(),
                "prev": self.prev_hash,
            }
        )
        if data_json is not None:
            # No other member's text can hold this: each is a string or a number.
            body = body.replace('"data":null', f'"data":{data_json}', 1)
        return hashlib.sha256(body.encode()).hexdigest()

    @property
    def summary(self) -> str:
        d = self.data
        if self.kind == self.Kind.TOOL:
            return f"{d.get('tool')} {'failed' if d.get('is_error') else 'ok'}"
        if self.kind == self.Kind.STATUS:
            return f"{d.get('from') or '—'} → {d.get('to')}"
        return self.kind


class Checkpoint(models.Model):
    """Engine state after a step. Small: the conversation itself is the timeline."""

    # No index of its own: UNIQUE(run, seq)'s index serves every lookup by run.
    run = models.ForeignKey(
        "runs.Run", on_delete=models.CASCADE, related_name="checkpoints", db_index=False
    )
    seq = models.PositiveIntegerField(help_text="Timeline seq this state follows.")
    state = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now)
    run_created = RunCreatedField(null=True, editable=False)  # as Step's

    class Meta:
        ordering = ["run", "-seq"]
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="checkpoint_seq_unique_per_run")
        ]

    def __str__(self) -> str:
        return f"{self.run_id}@{self.seq}"
