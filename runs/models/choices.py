"""A run's statuses, the moves between them (TRANSITIONS), its triggers and the reasons it
ended. `Run.Status`, `Run.Trigger` and `Run.Termination` are these; plain values, no model."""

from django.db import models


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

# The values the CHECK constraints allow (migrations hold them as lists).
CHECK_STATUSES = Status.values
CHECK_TRIGGERS = Trigger.values
CHECK_TERMINATIONS = Termination.values
