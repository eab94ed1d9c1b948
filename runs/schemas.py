"""What the runs API accepts and returns (django-ninja schemas, hence the OpenAPI docs)."""

from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Annotated, Any, Literal
from uuid import UUID

from django.db.models import Q
from django.utils import timezone
from ninja import Field, FilterSchema, Schema
from ninja.filter_schema import FilterLookup
from pydantic import ConfigDict, field_validator

from .models import Run

# Strict ints: a JSON `true` or `"12"` is a mistake in a limit, not a number.
PositiveInt = Annotated[int, Field(strict=True, ge=1)]


# --- catalogue -------------------------------------------------------------------------------
class ToolOut(Schema):
    name: str
    description: str
    reversible: bool
    blast: str = Field(description="Blast radius: none, low, medium, high or critical.")
    accepts_idempotency_key: bool
    timeout_seconds: float
    on_reject: str
    input_schema: dict[str, Any]


class LimitsOut(Schema):
    max_steps: int
    max_cost_usd: Decimal
    max_seconds: int
    max_consecutive_errors: int


class AgentOut(Schema):
    slug: str
    title: str
    description: str
    model: str
    tools: list[ToolOut]
    input_schema: dict[str, Any] = Field(
        description="JSON schema of `input` for POST /api/runs. Numbers may be sent as strings."
    )
    limits: LimitsOut = Field(description="Defaults a run gets when `limits` is not given.")
    max_limits: LimitsOut = Field(description="The most `limits` may be raised to at launch.")


# --- launch ----------------------------------------------------------------------------------
class LimitsIn(Schema):
    """Overrides of the agent's default limits; each is capped by the agent's max_limits."""

    model_config = ConfigDict(extra="forbid")

    max_steps: PositiveInt | None = None
    max_cost_usd: Annotated[Decimal, Field(gt=0, max_digits=10, decimal_places=4)] | None = None
    max_seconds: PositiveInt | None = None
    max_consecutive_errors: PositiveInt | None = None

    @field_validator("max_cost_usd", mode="before")
    @classmethod
    def _no_bool_cost(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("must be a number")
        return value


class LaunchIn(Schema):
    model_config = ConfigDict(extra="forbid")

    agent: str = Field(max_length=64, description="Slug of an agent from GET /api/agents.")
    input: dict[str, Any] = Field(description="Validated against the agent's input_schema.")
    limits: LimitsIn | None = None


# --- runs ------------------------------------------------------------------------------------
class CountersOut(Schema):
    steps: int = Field(description="Model calls made.")
    errors: int
    consecutive_errors: int
    retries: int
    last_seq: int = Field(description="Seq of the newest timeline step.")


class UsageOut(Schema):
    tokens_in: int
    tokens_out: int
    cost_usd: Decimal


class OutcomeOut(Schema):
    """What people decided in the run and how its tool calls went, beyond its status: a run
    can succeed after its refund was rejected."""

    approved: int = Field(description="Gated calls approved as proposed.")
    edited: int = Field(description="Gated calls approved with edited arguments.")
    rejected: int = Field(description="Gated calls and questions rejected.")
    answered: int = Field(description="Questions answered.")
    expired: int = Field(description="Approvals nobody decided in time.")
    tool_failed: int = Field(description="Tool calls that failed (rejections not included).")
    badges: list[str] = Field(description='What lists show, e.g. "1 rejected", worst first.')


class TimeOut(Schema):
    working_seconds: float = Field(
        description="Elapsed time less time waiting for people: what max_seconds limits."
    )
    waiting_seconds: float = Field(description="Time spent waiting for people so far.")
    waiting_since: datetime | None = Field(description="Start of the current wait, if any.")


class RunOut(Schema):
    id: UUID
    agent: str
    agent_title: str
    input_summary: str = Field(description="One line that tells this run's input apart.")
    status: Run.Status
    status_detail: str
    termination_reason: str = Field(description="Why the run finished; empty while active.")
    termination_label: str
    trigger: Run.Trigger
    source: str = Field(
        description="Who or what pulled the trigger (a token, a webhook "
        "delivery, a schedule, a parent run, a checkpoint)."
    )
    provider: str
    scripted: bool = Field(description="Made with the scripted provider, not a real model.")
    launched_by: str | None = Field(description="Username of whoever launched it.")
    parent_id: UUID | None
    limits: LimitsOut
    counters: CountersOut
    usage: UsageOut
    outcome: OutcomeOut
    time: TimeOut
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime

    @staticmethod
    def resolve_agent_title(run: Run) -> str:
        # The list annotates the title so it can leave the snapshot unloaded.
        if "snapshot_title" in run.__dict__:
            # Annotated (the list): never touch the deferred snapshot, one query per row.
            return run.snapshot_title or run.agent
        return run.agent_config.get("title") or run.agent

    @staticmethod
    def resolve_termination_label(run: Run) -> str:
        return run.get_termination_reason_display() if run.termination_reason else ""

    @staticmethod
    def resolve_scripted(run: Run) -> bool:
        return run.is_scripted

    @staticmethod
    def resolve_launched_by(run: Run) -> str | None:
        return run.launched_by.get_username() if run.launched_by else None

    @staticmethod
    def resolve_limits(run: Run) -> dict:
        return {
            "max_steps": run.max_steps,
            "max_cost_usd": run.max_cost_usd,
            "max_seconds": run.max_seconds,
            "max_consecutive_errors": run.max_consecutive_errors,
        }

    @staticmethod
    def resolve_counters(run: Run) -> dict:
        return {
            "steps": run.step_count,
            "errors": run.error_count,
            "consecutive_errors": run.consecutive_errors,
            "retries": run.retry_count,
            "last_seq": run.last_seq,
        }

    @staticmethod
    def resolve_usage(run: Run) -> dict:
        return {"tokens_in": run.tokens_in, "tokens_out": run.tokens_out, "cost_usd": run.cost_usd}

    @staticmethod
    def resolve_outcome(run: Run) -> dict:
        return {
            "approved": run.approved_count,
            "edited": run.edited_count,
            "rejected": run.rejected_count,
            "answered": run.answered_count,
            "expired": run.expired_count,
            "tool_failed": run.tool_failed_count,
            "badges": [label for _, label in run.outcome_badges],
        }

    @staticmethod
    def resolve_time(run: Run) -> dict:
        return {
            "working_seconds": round(run.working_seconds, 3),
            "waiting_seconds": round(run.waiting_seconds, 3),
            "waiting_since": run.waiting_since,
        }


class RunDetailOut(RunOut):
    input: dict[str, Any]
    output: str
    pending_approvals: int = Field(description="Approvals of this run waiting for a person.")
    trace_id: str = Field(
        description="The run's OpenTelemetry trace id (32 hex digits); empty when it was "
        "launched with tracing off."
    )
    trace_url: str = Field(
        description="The trace's page in the tracing back end (AGENTOPS_TRACE_URL); empty "
        "when not configured or the run has no trace."
    )

    @staticmethod
    def resolve_input(run: Run) -> dict:
        # As the timeline keeps it: masked under the agent's PII policy, like the export.
        return run.masked(run.input)

    @staticmethod
    def resolve_output(run: Run) -> str:
        return run.masked(run.output)

    @staticmethod
    def resolve_pending_approvals(run: Run) -> int:
        # Set by the caller (with_pending_count), so serialising never queries behind its back.
        return getattr(run, "pending_approvals", 0)


def with_pending_count(run: Run) -> Run:
    """The run with its pending approvals counted (one COUNT), for RunDetailOut."""
    # Through the reverse relation: approvals stand above runs, runs never import them.
    run.pending_approvals = run.approvals.pending().count()
    return run


class ExportUsageOut(UsageOut):
    # Export files have always carried these here too (the same figures as `counters`).
    steps: int
    errors: int


class RunExportOut(RunDetailOut):
    """A run in an export file (GET /runs/<id>/export/json|jsonl): the detail plus the
    agent's configuration as it was at launch."""

    agent_config: dict[str, Any]
    usage: ExportUsageOut

    @staticmethod
    def resolve_usage(run: Run) -> dict:
        return {**RunOut.resolve_usage(run), "steps": run.step_count, "errors": run.error_count}


class RunLiveOut(RunOut):
    """A run as live pages show it, published with each step (runs/events.py): the summary,
    plus what the run's header shows beyond it."""

    output: str
    model: str = Field(description="The model of the agent's launch snapshot.")

    @staticmethod
    def resolve_model(run: Run) -> str:
        return str(run.agent_config.get("model", ""))


class RunFilters(FilterSchema):
    status: Run.Status | None = None
    agent: str | None = Field(None, max_length=64)
    trigger: Run.Trigger | None = None
    launched_by: Annotated[str | None, FilterLookup("launched_by__username")] = Field(
        None, max_length=150, description="Username."
    )
    created_after: Annotated[datetime | None, FilterLookup("created_at__gte")] = Field(
        None, description="ISO 8601 date or datetime (UTC unless an offset is given)."
    )
    created_before: Annotated[datetime | None, FilterLookup("created_at__lt")] = Field(
        None, description="ISO 8601 date or datetime, exclusive."
    )
    outcome: (
        Literal["approved", "edited", "rejected", "answered", "expired", "tool_failed"] | None
    ) = Field(None, description="Runs with at least one such decision or failed tool call.")

    def filter_outcome(self, value: str | None) -> Q:
        # The run's own counter (OutcomeOut): no join.
        return Q(**{f"{value}_count__gt": 0}) if value else Q()

    @field_validator("created_after", "created_before")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        if timezone.is_naive(value):
            return timezone.make_aware(value, UTC)
        # In UTC: PostgreSQL refuses offsets beyond ±15:59 (pydantic accepts up to ±23:59),
        # which was a 500. A time that has no UTC equivalent is a field error.
        try:
            return value.astimezone(UTC)
        except OverflowError:
            raise ValueError("out of range once converted to UTC") from None


# --- timeline --------------------------------------------------------------------------------
class StepOut(Schema):
    seq: int
    kind: str
    data: dict[str, Any]
    cost_usd: Decimal
    tokens_in: int
    tokens_out: int
    latency_ms: int
    created_at: datetime
    hash: str
    prev_hash: str


class StepPage(Schema):
    items: list[StepOut]
    has_more: bool = Field(description="More steps follow: ask again with after=<last seq>.")
    next_cursor: str | None = Field(
        description="When more steps follow: ask again with cursor=<this> (same as after)."
    )
    last_seq: int = Field(description="The run's newest seq when this page was read.")


class CheckpointOut(Schema):
    seq: int
    created_at: datetime


class CancelIn(Schema):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field("", max_length=500)


# --- spend -----------------------------------------------------------------------------------
class SpendOut(Schema):
    model_calls: int
    tokens_in: int = Field(description="Input tokens, cache reads and writes included.")
    tokens_out: int
    cost_usd: Decimal = Field(description="Model calls and tools.")
    tool_cost_usd: Decimal = Field(description="The tools' part of cost_usd.")
    cache_read_tokens: int = Field(0, description="Input tokens read from the prompt cache.")
    cache_write_tokens: int = Field(0, description="Input tokens written to the prompt cache.")
    cache_saved_usd: Decimal = Field(
        Decimal(0),
        description="What prompt caching saved: the reads at the input price less their "
        "price, less the writes' premium (negative while the cache is only written).",
    )


class AgentDaySpendOut(SpendOut):
    agent: str
    day: date = Field(description="UTC day.")


class AgentSpendOut(SpendOut):
    agent: str


class CostsOut(Schema):
    since: datetime = Field(description="Midnight UTC of the window's first day.")
    days: int
    rows: list[AgentDaySpendOut] = Field(
        description="Per agent and UTC day, days without a model call or a charge left out."
    )
    agents: list[AgentSpendOut] = Field(description="Per agent, over the whole window.")
    total: SpendOut
