"""Run, its append-only timeline (Step), checkpoints and the side-effect ledger."""

import contextlib
import hashlib
import json
import re
import string
import uuid
from collections.abc import Sequence
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connections, models, transaction
from django.db.models import BooleanField, ExpressionWrapper, F, Q, TextField
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast
from django.dispatch import Signal
from django.utils import timezone

from accounts import teams
from agentkit import pii, tracing
from agentkit.database import in_batches

from . import queue, sql, trace_links


def canonical_json(value: Any) -> str:
    """One spelling per value: sorted keys, no spaces. Hashes and idempotency keys use it."""
    return _as_stored_spelling(_encoded(value), value, _encoded)


def _encoded(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), cls=DjangoJSONEncoder)


def _as_stored_spelling(text: str, value: Any, encode) -> str:
    """`text` (the encoding of `value`), unless a float in it is one a Postgres jsonb column
    gives back otherwise: -0.0 comes back 0.0, 1e+16 the integer 10000000000000000. Such a
    step's hash, made from what was written, would not match what is read, and the chain
    would look tampered with. Rare, so looked for in the text (a string holding "e+" costs
    only a second encoding)."""
    if "e+" not in text and "-0.0" not in text:
        return text
    return encode(_floats_as_stored(value))


def _floats_as_stored(value: Any) -> Any:
    if isinstance(value, float):
        if value == 0:
            return 0.0
        return int(value) if "e+" in repr(value) else value
    if isinstance(value, dict):
        return {key: _floats_as_stored(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_floats_as_stored(item) for item in value]
    return value


# canonical_json for values that are JSON already (made once: json.dumps with `cls` builds an
# encoder per call). It raises TypeError where canonical_json would turn a date or a Decimal
# into a string: the JSON a database stores is such a value, which Django's JSONField stores.
_plain_canonical = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode


def args_hash(tool: str, args: dict) -> str:
    """The identity of a tool call: an approval binds to it, and the engine executes only a
    call whose hash is the one approved."""
    return hashlib.sha256(canonical_json({"tool": tool, "args": args}).encode()).hexdigest()


# Sent inside the transaction that cancels a run, with the run locked (sender=Run, run=...,
# by=the username of whoever cancelled it, or None):
# what waits on the run ends with it (approvals/apps.py cancels its pending approvals).
run_cancelled = Signal()
# Sent for every step appended, inside its transaction (sender=Step, step=...): runs/events.py
# publishes it once committed, runs/chains.py sends a success's follow-ups (connected in
# runs/apps.py; models do not import the live path, whose payloads are built from the API's
# schemas of these models).
step_appended = Signal()

# Literal lists for the CHECK constraints (Meta cannot see the nested choices classes).
_STATUSES = ["queued", "running", "waiting", "succeeded", "failed", "cancelled"]
_TRIGGERS = [
    "form",
    "api",
    "webhook",
    "schedule",
    "chained",
    "fork",
    "replay",
    "external",
    "compensation",
]
_TERMINATIONS = [
    "completed",
    "max_steps",
    "max_cost",
    "max_seconds",
    "consecutive_errors",
    "no_progress",
    "cancelled",
    "approval_expired",
    "rejected",
    "llm_error",
    "verification_failed",
    "output_invalid",
    "blocked",
    "pending_timeout",
    "agent_failed",
    "truncated",
    "refused",
    "budget",
    "compensation_failed",
    "idle",
]
_STEP_KINDS = [
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


# Search results up to this many are sorted after the search index found them, more are
# found by walking the runs newest first (RunQuerySet.newest_first_for_search).
SEARCH_SORTS_AT_MOST = 5000


# Read as spaces in the indexed text too (migration 0005).
_PUNCTUATION = re.compile(f"[{re.escape(string.punctuation)}]+")


def _prefix_tsquery(text: str) -> str:
    """The words of `text` for to_tsquery, every one to be found, the last part of each as
    the start of a word: `boss@exa refund` is `'boss' <-> 'exa':* & 'refund':*`. The parts
    hold no ASCII punctuation, so no quote, backslash or operator of tsquery's syntax; parts
    without a letter or digit are left out. Empty when nothing is left."""
    terms = []
    for word in text.split():
        parts = [p for p in _PUNCTUATION.split(word) if any(ch.isalnum() for ch in p)]
        if parts:
            *whole, last = parts
            terms.append(" <-> ".join([*(f"'{p}'" for p in whole), f"'{last}':*"]))
    return " & ".join(terms)


class RunQuerySet(models.QuerySet["Run"]):
    def active(self):
        return self.filter(status__in=Run.ACTIVE_STATUSES)

    def visible_to(self, user):
        """Runs `user` may read: their role's, on the agents their teams reach
        (accounts/teams.py). The rule lives here so views, API and consumers agree."""
        agents = teams.scope(user, teams.Power.VIEW)
        return self.none() if agents.nothing else self.filter(agents.q("agent"))

    def operable_by(self, user):
        """Runs `user` may cancel or finish operations of (the launch power)."""
        agents = teams.scope(user, teams.Power.LAUNCH)
        return self.none() if agents.nothing else self.filter(agents.q("agent"))

    def for_lists(self):
        """What a row in a list shows: the launcher, and not the payloads (input, output and
        the launch snapshot can be kilobytes each; a row shows the input's summary)."""
        return self.select_related("launched_by").defer("input", "output", "agent_config")

    def search(self, text: str):
        """Runs whose input or output holds every word of `text`, a word matching the start
        of one (`refu` finds "refunded", `example.com` finds boss@example.com), and the run
        whose id `text` is or starts with (the 8-character short id the UI shows).

        On Postgres through the full-text index (migration 0005), with a query built from
        the text less its ASCII punctuation, so nothing a person types is a tsquery syntax
        error. Elsewhere (the embedded SQLite), and for text with no letter or digit, each
        word is looked for as a case-insensitive substring of the input or output.
        """
        runs: models.QuerySet[Any] = self
        text = text.strip()
        tsquery = _prefix_tsquery(text)
        if connections[self.db].vendor == "postgresql" and tsquery:
            # The column is not a model field (see the migration); the query is a parameter.
            matches = Q(
                RawSQL(
                    "runs_run.search @@ to_tsquery('simple', %s)",
                    [tsquery],
                    output_field=BooleanField(),
                )
            )
        else:
            runs = runs.annotate(input_text=Cast("input", TextField()))
            matches = Q()
            for word in text.split():
                matches &= Q(input_text__icontains=word) | Q(output__icontains=word)
        with contextlib.suppress(ValueError):  # not a run id
            matches |= Q(pk=uuid.UUID(text))
        digits = text.replace("-", "").lower()
        if 8 <= len(digits) < 32 and all(c in string.hexdigits for c in digits):
            # The short id the UI shows (its first 8 characters, or more): the ids that start
            # with it, as a range of the primary key's index.
            matches |= Q(
                pk__gte=uuid.UUID(digits.ljust(32, "0")), pk__lte=uuid.UUID(digits.ljust(32, "f"))
            )
        return runs.filter(matches)

    def newest_first_for_search(self, count: int):
        """Search results (`search`) newest first, read the way their number suits.

        Postgres guesses that a prefix matches 2 % of runs, so for a page of them it walks
        the created_at index newest first, and reads every run when there are few matches
        (130 ms for 11 among 100 000). A few are rather sorted after the search index found
        them (0.3 ms); many are soon met on that walk (sorting 83 000 took 90 ms).
        Either way ordered by (created_at, id), as keyset pages (runs/paging.py) need.
        """
        if count > SEARCH_SORTS_AT_MOST or connections[self.db].vendor != "postgresql":
            return self.order_by("-created_at", "-id")
        # An expression the created_at index cannot serve.
        created = ExpressionWrapper(
            F("created_at") + timedelta(0), output_field=models.DateTimeField()
        )
        return self.order_by(created.desc(), "-id")


def queued_resend_seconds() -> float:
    """AGENTOPS_QUEUED_RESEND_SECONDS, by default half the lease: a queued run whose message
    was lost is sent again within that plus one sweep, well inside two leases."""
    cfg = settings.AGENTOPS
    return float(cfg.get("QUEUED_RESEND_SECONDS") or cfg["LEASE_SECONDS"] / 2)


class Run(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        WAITING = "waiting"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"

    class Trigger(models.TextChoices):
        FORM = "form"
        API = "api"
        WEBHOOK = "webhook"
        SCHEDULE = "schedule"
        CHAINED = "chained"
        FORK = "fork"
        REPLAY = "replay"
        # A session of an agent that runs elsewhere (gateway/): the engine never advances
        # it; the agent itself submits its calls and reports what happened.
        EXTERNAL = "external"
        # Undoes committed effects of a failed or cancelled run (runs/compensation/models.py): its
        # only calls are their compensations, gated and through the ledger; no model call.
        COMPENSATION = "compensation"

    class Termination(models.TextChoices):
        COMPLETED = "completed", "completed"
        MAX_STEPS = "max_steps", "max steps reached"
        MAX_COST = "max_cost", "max cost reached"
        MAX_SECONDS = "max_seconds", "max wall time reached"
        CONSECUTIVE_ERRORS = "consecutive_errors", "too many consecutive errors"
        NO_PROGRESS = "no_progress", "no progress (same tool call repeated)"
        CANCELLED = "cancelled", "cancelled by an operator"
        APPROVAL_EXPIRED = "approval_expired", "approval expired"
        REJECTED = "rejected", "action rejected by an approver"
        LLM_ERROR = "llm_error", "model call failed"
        VERIFICATION_FAILED = "verification_failed", "verification failed"
        OUTPUT_INVALID = "output_invalid", "output failed validation"
        BLOCKED = "blocked", "blocked by a guardrail"
        PENDING_TIMEOUT = "pending_timeout", "a pending operation timed out"
        AGENT_FAILED = "agent_failed", "the external agent reported a failure"
        TRUNCATED = "truncated", "the model's answer was cut off"
        REFUSED = "refused", "the model declined to answer"
        BUDGET = "budget", "the agent's budget is spent"
        COMPENSATION_FAILED = "compensation_failed", "a compensation was not made"
        IDLE = "idle", "the external session was idle too long"

    TRANSITIONS: dict[str, set[str]] = {
        Status.QUEUED: {Status.RUNNING, Status.CANCELLED, Status.FAILED},
        Status.RUNNING: {
            Status.QUEUED,
            Status.WAITING,
            Status.SUCCEEDED,
            Status.FAILED,
            Status.CANCELLED,
        },
        # Waiting -> running only for an external session (`resume`): no worker takes it.
        Status.WAITING: {Status.QUEUED, Status.RUNNING, Status.FAILED, Status.CANCELLED},
        Status.SUCCEEDED: set(),
        Status.FAILED: set(),
        Status.CANCELLED: set(),
    }
    ACTIVE_STATUSES = (Status.QUEUED, Status.RUNNING, Status.WAITING)
    TERMINAL_STATUSES = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)

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
            models.CheckConstraint(condition=Q(status__in=_STATUSES), name="run_status_valid"),
            models.CheckConstraint(condition=Q(trigger__in=_TRIGGERS), name="run_trigger_valid"),
            models.CheckConstraint(
                condition=Q(termination_reason="") | Q(termination_reason__in=_TERMINATIONS),
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
    def is_terminal(self) -> bool:
        return self.status in self.TERMINAL_STATUSES

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

    def can_transition(self, new: str) -> bool:
        return new in self.TRANSITIONS[self.status]

    def transition_to(self, new: str, *, expect: str | None = None, **fields: Any) -> bool:
        """Compare-and-set the status; False means another process moved the run first.

        The caller appends the matching timeline step in the same transaction.
        """
        old = expect or self.status
        if new not in self.TRANSITIONS[old]:
            return False
        now = timezone.now()
        if new in self.TERMINAL_STATUSES:
            fields.setdefault("finished_at", now)
            fields.setdefault("lease_owner", "")
            fields.setdefault("lease_expires_at", None)
        fields.update(status=new, updated_at=now)
        updated = Run.objects.filter(pk=self.pk, status=old).update(
            version=F("version") + 1, **fields
        )
        if updated:
            for name, value in fields.items():
                setattr(self, name, value)
            self.version += 1
        return bool(updated)

    # --- timeline -------------------------------------------------------------------------
    def append_step(
        self, kind: str, data: dict, *, update: dict | None = None, **columns: Any
    ) -> "Step":
        """Append one step, hash-chained to the previous one; `update` sets more of the
        run's fields in the same UPDATE.

        Must run inside a transaction that holds this run's row lock (see `locked`), so
        seq stays contiguous and the chain has one head.
        """
        step = self._next_step(kind, data, columns)
        sql.update(
            Run, {"last_seq": step.seq, "last_hash": step.hash, **(update or {})}, {"id": self.pk}
        )
        return self._saved(step, update)

    def append_step_if_expected(
        self,
        kind: str,
        data: dict,
        *,
        expect: dict,
        update: dict | None = None,
        checkpoint: dict | None = None,
        then: tuple[tuple[str, dict, dict], ...] = (),
        also: Sequence[sql.Update] = (),
        **columns: Any,
    ) -> "Step | None":
        """Append a step if the run's row still holds the `expect`ed values and the timeline
        head this copy knows; with `then`, (kind, data, columns) steps that follow it in
        the same write (a final answer and the run's termination: one is never recorded
        without the other); with `checkpoint`, also the engine state after the last of them;
        with `also`, other rows' updates that belong with the step (a call's ledger outcome).

        One compare-and-set UPDATE both takes the row lock and checks; on Postgres the steps
        and checkpoint go in the same statement (runs/sql.py). None: nothing was written.
        Returns the first step.
        """
        steps = [self._next_step(kind, data, columns)]
        for then_kind, then_data, then_columns in then:
            steps.append(self._next_step(then_kind, then_data, dict(then_columns), after=steps[-1]))
        inserts: list[sql.Insert] = [(step, STEP_COLUMNS, (), ()) for step in steps]
        if checkpoint is not None:
            row = Checkpoint(
                run=self, seq=steps[-1].seq, state=checkpoint, run_created=self.created_at
            )
            inserts.append((row, CHECKPOINT_COLUMNS, checkpoint_conflict(), ("state",)))
        written = sql.update_then_insert(
            Run,
            {"last_seq": steps[-1].seq, "last_hash": steps[-1].hash, **(update or {})},
            {**expect, "id": self.pk, "last_seq": self.last_seq},
            inserts,
            also,
        )
        if not written:
            return None
        for step in steps:
            self._applied(step, update)
        return steps[0]

    def _next_step(
        self, kind: str, data: dict, columns: dict, *, after: "Step | None" = None
    ) -> "Step":
        columns.setdefault("created_at", timezone.now())
        step = Step(
            run=self,
            seq=(after.seq if after else self.last_seq) + 1,
            kind=kind,
            data=self.recorded(data),
            prev_hash=after.hash if after else self.last_hash,
            run_created=self.created_at,
            **columns,
        )
        try:
            text = _as_stored_spelling(_plain_canonical(step.data), step.data, _plain_canonical)
        except (TypeError, ValueError):  # not plain JSON: hashed as ever, stored as ever
            step.hash = step.compute_hash()
        else:
            # Encoded once for both: the hash covers this text, and the insert stores it
            # (runs/sql.py: on Postgres, where jsonb keeps the value and not its spelling).
            step.hash = step.compute_hash(data_json=text)
            step.json_text = {"data": text}
        return step

    def recorded(self, data: dict) -> dict:
        """A step's data as the timeline keeps it. With a PII policy, personal data is masked
        before the step is written: the timeline never holds it, so nothing that shows or
        exports the timeline can leak it (run page, live frames, steps API, evidence,
        exports, logs) and the hash chain covers what is kept. The raw values live only
        where the run needs them: its checkpoint (the conversation the model continues) and
        the call an approver decides."""
        return self.masked(data)

    def masked(self, value: Any) -> Any:
        """`value` (JSON: the input, the output, a step's data) with personal data masked as
        the timeline keeps it, when the agent has a PII policy; as it is otherwise."""
        policy = (self.agent_config or {}).get("pii") if self.agent_config else None
        return pii.masker(policy)(value) if policy else value

    def first_step(self, *, by: str | None, **details: Any) -> "Step":
        """The launched step of a run not saved yet (who launched it, its input, and what
        else the launcher records); the run's head points at it, so the caller inserts both
        (and a checkpoint) in one go, then publishes the step."""
        data = {
            "event": "launched",
            "from": None,
            "to": self.status,
            "trigger": self.trigger,
            "source": self.source,
            "by": by,
            **details,
        }
        step = self._next_step(Step.Kind.STATUS, data, {"created_at": self.created_at})
        self.last_seq, self.last_hash = step.seq, step.hash
        return step

    def _saved(self, step: "Step", update: dict | None) -> "Step":
        sql.insert(step, STEP_COLUMNS)
        return self._applied(step, update)

    def _applied(self, step: "Step", update: dict | None) -> "Step":
        self.last_seq, self.last_hash = step.seq, step.hash
        for name, value in (update or {}).items():
            setattr(self, name, value)
        _publish_on_commit(step)
        return step

    @classmethod
    def locked(cls, pk) -> "Run":
        """The run re-read under a row lock; call inside transaction.atomic()."""
        return cls.objects.select_for_update().get(pk=pk)

    def cancel(self, *, by=None, reason: str = "") -> bool:
        """Operator cancel of a queued, running or waiting run. False if already finished."""
        with transaction.atomic():
            run = Run.locked(self.pk)
            if run.is_terminal:
                return False
            old = run.status
            run.transition_to(
                Run.Status.CANCELLED,
                termination_reason=Run.Termination.CANCELLED,
                status_detail=reason or "cancelled by an operator",
            )
            run.append_step(
                Step.Kind.STATUS,
                {
                    "event": "cancelled",
                    "from": old,
                    "to": Run.Status.CANCELLED,
                    "reason": Run.Termination.CANCELLED,
                    "detail": reason,
                    "by": by.get_username() if by else None,
                },
            )
            run_cancelled.send(sender=Run, run=run, by=by.get_username() if by else None)
        self.refresh_from_db()
        return True

    def park(
        self, detail: str, *, reason: str, note: str = "", by: str | None = None, **fields: Any
    ) -> bool:
        """Running -> waiting (for people, an operation, a rate limit's window, an operator's
        pause), with its paused step; the wait's start is kept so it can be left out of
        working time. Call under the run's row lock. `detail` is the run's status line,
        `reason` and `note` (the status line if empty) the step's, `by` who asked for it (an
        operator's pause); `fields`, more of the run's fields set with the status. False,
        with no step, when it was not running."""
        if not self.transition_to(
            Run.Status.WAITING,
            status_detail=detail,
            lease_owner="",
            lease_expires_at=None,
            waiting_since=timezone.now(),
            **fields,
        ):
            return False
        step = {
            "event": "paused",
            "from": Run.Status.RUNNING,
            "to": Run.Status.WAITING,
            "reason": reason,
            "detail": note or detail,
        }
        if by is not None:
            step["by"] = by
        self.append_step(Step.Kind.STATUS, step)
        return True

    @property
    def is_paused(self) -> bool:
        """Parked by an operator's pause (not by a gate or an operation)."""
        return self.status == Run.Status.WAITING and self.paused_at is not None

    def terminate(self, status: str, reason: str, detail: str = "", *, output: str = "") -> bool:
        """End the run (a terminal `status`, Run.TRANSITIONS) with its terminated step. Call
        under the run's row lock; False, with no step, when it may not end that way (it
        already ended). The engine ends its own runs by compare-and-set (terminator.py)
        with the same step."""
        old = self.status
        if not self.transition_to(
            status, termination_reason=reason, status_detail=detail[:500], output=output
        ):
            return False
        self.append_step(Step.Kind.STATUS, self.terminated_step(old, status, reason, detail))
        return True

    @staticmethod
    def terminated_step(old: str, status: str, reason: str, detail: str) -> dict:
        """The terminated step's data."""
        return {
            "event": "terminated",
            "from": old,
            "to": status,
            "reason": reason,
            "detail": detail,
        }

    def resume(
        self,
        detail: str,
        *,
        first: tuple[str, dict, dict] | None = None,
        by: str | None = None,
        **fields: Any,
    ) -> bool:
        """Waiting -> queued (a person decided what it waited for), with its step, and sent
        to a worker once committed; an external session goes back to running, unsent. Call
        under the run's row lock (`locked`); False when it was not waiting (a quick decision
        found it still running: its worker goes on).

        `first` is (kind, data, update) of a step that comes before the resumed one (the
        decision that resumed it): both steps and the run's change are one write. `by`: the
        operator who resumed it (their Resume); `fields`: more of the run's fields to set.
        """
        if self.status != Run.Status.WAITING:
            return False
        # An external session is not the engine's to advance: its agent, long-polling for
        # the decision, goes on by itself; the run is running again for its next call.
        external = self.trigger == Run.Trigger.EXTERNAL
        to = Run.Status.RUNNING if external else Run.Status.QUEUED
        now = timezone.now()
        waited = self.seconds_waited
        if self.waiting_since is not None:
            waited += (now - self.waiting_since).total_seconds()
        resumed = {
            "event": "resumed",
            "from": Run.Status.WAITING,
            "to": to,
            "detail": detail,
        }
        if by is not None:
            resumed["by"] = by
        kind: str
        update: dict[str, Any]
        then: tuple[tuple[str, dict[str, Any], dict[str, Any]], ...]
        kind, data, update, then = Step.Kind.STATUS, resumed, {}, ()
        if first is not None:
            (kind, data, update), then = first, ((Step.Kind.STATUS, resumed, {}),)
        written = self.append_step_if_expected(
            kind,
            data,
            expect={"status": Run.Status.WAITING},
            update={
                **update,
                # Plain values (the row is locked, so this copy is current): the write is one
                # statement with its steps.
                "version": self.version + 1,
                "status": to,
                "status_detail": "",
                "seconds_waited": waited,
                "waiting_since": None,
                "updated_at": now,
                **fields,
            },
            then=then,
        )
        if written is None:
            return False
        if not external:
            # A person's decision or choice: the run goes ahead of any backlog of runs.
            person = by is not None or kind in (Step.Kind.DECISION, Step.Kind.OPERATOR)
            transaction.on_commit(
                lambda: queue.enqueue(self.pk, agent=self.agent, for_a_person=person)
            )
        return True

    def reopen(self, *, step: dict, state: dict) -> bool:
        """Failed -> queued: an operator resumes a failed run from its last checkpoint with a
        choice (runs/steering/models.py reopen), instead of forking it. The one way out of a final
        status, so not in TRANSITIONS: its reopened step, the engine `state` it resumes
        from (a checkpoint at that step) and the run's change are one write, and it is sent
        to a worker once committed. The time it lay failed counts as waiting, not working; the
        consecutive errors start again from none. Call under the run's row lock; False when
        it was not failed."""
        if self.status != Run.Status.FAILED:
            return False
        now = timezone.now()
        waited = self.seconds_waited + (now - (self.finished_at or now)).total_seconds()
        data = {"event": "reopened", "from": Run.Status.FAILED, "to": Run.Status.QUEUED, **step}
        written = self.append_step_if_expected(
            Step.Kind.STATUS,
            data,
            expect={"status": Run.Status.FAILED},
            update={
                "version": self.version + 1,
                "status": Run.Status.QUEUED,
                "termination_reason": "",
                "status_detail": "",
                "output": "",
                "finished_at": None,
                "consecutive_errors": 0,
                "seconds_waited": waited,
                "updated_at": now,
            },
            checkpoint=state,
        )
        if written is None:
            return False
        transaction.on_commit(lambda: queue.enqueue(self.pk, agent=self.agent, for_a_person=True))
        return True

    def verify_chain(self) -> tuple[bool, int | None]:
        """Recompute the hash chain; returns (ok, first bad seq)."""
        prev = ""
        expected_seq = 1
        for step in in_batches(self.steps.all(), by=("seq",)):
            if (
                step.seq != expected_seq
                or step.prev_hash != prev
                or step.compute_hash() != step.hash
            ):
                return False, step.seq
            prev = step.hash
            expected_seq += 1
        return prev == self.last_hash, None if prev == self.last_hash else expected_seq


# Every column of a step but its id (runs/sql.py inserts them).
STEP_COLUMNS = (
    "run",
    "seq",
    "kind",
    "data",
    "cost_usd",
    "tokens_in",
    "tokens_out",
    "latency_ms",
    "created_at",
    "prev_hash",
    "hash",
    "run_created",
)


# Every column of a run, its id included (generated here, not by the database).
RUN_COLUMNS = tuple(f.name for f in Run._meta.concrete_fields)

# A checkpoint's columns but its id (the state is upserted per run and seq).
CHECKPOINT_COLUMNS = ("run", "seq", "state", "created_at", "run_created")


def checkpoint_conflict() -> tuple[str, ...]:
    """The columns of a checkpoint's upsert (ON CONFLICT): its unique constraint's, which on
    Postgres holds the partition key too (runs/migrations/0028)."""
    if connections["default"].vendor == "postgresql":
        return ("run", "seq", "run_created")
    return ("run", "seq")


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


def _publish_on_commit(step: "Step") -> None:
    step_appended.send(sender=Step, step=step)


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
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="steps", db_index=False)
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
            models.CheckConstraint(condition=Q(kind__in=_STEP_KINDS), name="step_kind_valid"),
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


class AgentDaySpend(models.Model):
    """Model calls, tokens and cost of one agent on one UTC day, kept by the database itself:
    a trigger on the insert of each step that is a model call or carries a cost adds it here
    (runs/migrations/0015, 0018), whoever writes it (the engine, the gateway, an import).
    `cost_usd` is everything charged (model calls and tools), `tool_cost_usd` the tools' part.
    Spend per agent and day (runs/costs.py) then reads a few rows per day instead of summing
    every charged step of the window.

    A day of an agent is SPEND_SHARDS rows (the shard is picked from the run's id): workers
    stepping runs of one agent at once would otherwise queue on one row lock until commit.
    Written by the trigger only."""

    agent = models.CharField(max_length=64)
    day = models.DateField()
    shard = models.PositiveSmallIntegerField()
    calls = models.PositiveIntegerField(default=0)
    tokens_in = models.BigIntegerField(default=0)
    tokens_out = models.BigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=16, decimal_places=6, default=Decimal(0))
    # Prompt caching: tokens read from and written to the cache (part of tokens_in), and what
    # it saved (the steps' data: runs/engine/model.py cache_saving). From migration 0018 on.
    cache_read_tokens = models.BigIntegerField(default=0)
    cache_write_tokens = models.BigIntegerField(default=0)
    cache_saved_usd = models.DecimalField(max_digits=16, decimal_places=6, default=Decimal(0))
    tool_cost_usd = models.DecimalField(max_digits=16, decimal_places=6, default=Decimal(0))

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "day", "shard"], name="spend_agent_day_shard")
        ]
        indexes = [models.Index(fields=["day"], name="runs_spend_day_idx")]

    def __str__(self) -> str:
        return f"{self.agent} {self.day} #{self.shard}"


SPEND_SHARDS = 8


BUDGET_THRESHOLDS_RISE = "The thresholds must rise: warn below ask-approval below stop."


class Budget(models.Model):
    """What one agent, or one team's agents together, may spend (model calls and tools, as
    their steps record them) in a period of the calendar in a time zone, and what happens as
    the spend grows: past `warn_percent` the approvers are told; past `approve_percent` a run
    goes on (or starts) only when a person says so; past `stop_percent` runs are stopped and
    new ones refused. A run answers to its agent's budget and to those of the teams owning its
    agent; the most severe wins. The rules are runs/budgets/models.py's; the engine applies them at
    each step boundary."""

    class Period(models.TextChoices):
        DAY = "day"
        WEEK = "week"  # Monday to Sunday
        MONTH = "month"

    # Exactly one of the two: an agent's budget names the agent; a team's budget names the
    # team (its agents are whichever it owns when the spend is read) and leaves `agent` "".
    agent = models.CharField(max_length=64, blank=True)
    team = models.ForeignKey(
        "accounts.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="budgets"
    )
    period = models.CharField(max_length=8, choices=Period.choices, default=Period.MONTH)
    time_zone = models.CharField(max_length=64, default="UTC")
    amount_usd = models.DecimalField(max_digits=12, decimal_places=2)
    warn_percent = models.PositiveSmallIntegerField(default=80)
    approve_percent = models.PositiveSmallIntegerField(default=100)
    stop_percent = models.PositiveSmallIntegerField(default=120)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["agent", "team__name", "period"]
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "period"],
                condition=Q(team__isnull=True),
                name="budget_one_per_agent_period",
                violation_error_message="This agent already has a budget for this period.",
            ),
            models.UniqueConstraint(
                fields=["team", "period"],
                condition=Q(team__isnull=False),
                name="budget_one_per_team_period",
                violation_error_message="This team already has a budget for this period.",
            ),
            models.CheckConstraint(
                condition=(Q(team__isnull=True) & ~Q(agent=""))
                | (Q(team__isnull=False) & Q(agent="")),
                name="budget_agent_or_team",
                violation_error_message="A budget is either an agent's or a team's: name one.",
            ),
            models.CheckConstraint(condition=Q(amount_usd__gt=0), name="budget_amount_positive"),
            models.CheckConstraint(
                condition=Q(warn_percent__gt=0)
                & Q(warn_percent__lt=F("approve_percent"))
                & Q(approve_percent__lt=F("stop_percent")),
                name="budget_thresholds_ascending",
                violation_error_message=BUDGET_THRESHOLDS_RISE,
            ),
        ]

    def __str__(self) -> str:
        return f"{self.owner}: {self.amount_usd} USD a {self.period}"

    @property
    def owner(self) -> str:
        """Whose budget, in words: the agent's slug, or "team <name>"."""
        return f"team {self.team.name}" if self.team is not None else self.agent

    @property
    def periodic(self) -> str:
        """ "daily", "weekly", "monthly"."""
        return "daily" if self.period == self.Period.DAY else f"{self.period}ly"


class BudgetCrossing(models.Model):
    """A threshold of a budget crossed in one of its periods: once each (the unique
    constraint is what makes it once, whichever worker sees it first), with the run it was
    seen on (that run's timeline has the step) and the spend then."""

    class Threshold(models.TextChoices):
        WARN = "warn"
        APPROVE = "approve"
        STOP = "stop"

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="crossings")
    period_start = models.DateTimeField()
    threshold = models.CharField(max_length=8, choices=Threshold.choices)
    spent_usd = models.DecimalField(max_digits=16, decimal_places=6)
    run = models.ForeignKey(Run, null=True, on_delete=models.SET_NULL, related_name="+")
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["budget", "period_start", "threshold"], name="budget_crossed_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.budget} {self.threshold} at {self.period_start:%Y-%m-%d}"


class Checkpoint(models.Model):
    """Engine state after a step. Small: the conversation itself is the timeline."""

    # No index of its own: UNIQUE(run, seq)'s index serves every lookup by run.
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="checkpoints", db_index=False
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
