"""Where the engine meets an operator who steers a live run (runs/steering/models.py takes the
requests): a pause taken at a step boundary, instructions delivered at the next model turn,
and failed calls held for an operator's choice (agents declared on_failure="ask").
Why and how: docs/design/modules.md."""

import time
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from agentkit.tools import Tool

from ..models import Instruction, Recovery, SideEffect, Step
from . import owned
from .conversation import operator_block
from .owned import StepAgain, Stop, Work, renewal
from .tool_calls import error_counters, tool_step

ASK = "ask"


def at_boundary(work: Work) -> None:
    """A step boundary: park the run if an operator asked for a pause (Stop); note whether
    instructions wait for the next model turn. The claim read both with the run's row; after
    it the row is looked at again at most once per RECHECK_AFTER_SECONDS (owned.look)."""
    if time.monotonic() - work.steer_read_at >= owned.RECHECK_AFTER_SECONDS:
        owned.look(work)
    if work.pause_asked:
        _pause(work)


def _pause(work: Work) -> None:
    with transaction.atomic():
        run = owned.locked(work)
        if run.pause_requested_at is None:
            work.pause_asked = False
            return  # resumed before it was taken
        by = _username(run.pause_requested_by_id)
        now = timezone.now()
        run.park(
            f"paused by {by} at {now:%Y-%m-%d %H:%M:%S} UTC",
            reason="paused by an operator",
            by=by,
            paused_at=now,
        )
        work.run = run
    raise Stop


def deliver_instructions(work: Work) -> None:
    """Before a model call: the operator's instructions not delivered yet, each an `operator`
    step written with its row marked delivered, and a user-role text for the model."""
    if not work.instructions_waiting:
        return
    work.instructions_waiting = False
    for instruction in Instruction.objects.filter(
        run=work.run.pk, delivered_seq__isnull=True
    ).select_related("by"):
        by = instruction.by.get_username() if instruction.by else "an operator"
        data = {
            "event": "instruction",
            "instruction": instruction.pk,
            "text": instruction.text,
            "by": by,
            "source": instruction.source,
            "sent_at": instruction.created_at.isoformat(),
        }
        now = timezone.now()
        delivered = {"delivered_seq": work.run.last_seq + 1, "delivered_at": now}
        owned.append(
            work,
            Step.Kind.OPERATOR,
            data,
            renewal(model_call_next=True),
            also=[(Instruction, delivered, {"id": instruction.pk, "delivered_seq": None})],
        )
        work.add_operator_text(operator_block(data))


# --- failed calls held for a person --------------------------------------------------------
def asks_on_failure(work: Work) -> bool:
    return work.agent_config.get("on_failure") == ASK


def hold_failure(
    work: Work,
    item: dict,
    tool: Tool,
    args: dict,
    *,
    error: str,
    attempts: int,
    key: str,
    effect: SideEffect | None,
    duration_ms: int,
    cost_usd: Decimal = Decimal(0),
) -> None:
    """Record a failed call as a `held` tool step (the agent does not see it), open its
    Recovery and park the run until an operator chooses. Never returns (Stop). What the
    failed attempts cost (a paid API bills them) is charged here, once."""
    counters = error_counters(work.run)
    data = tool_step(
        counters,
        item,
        error=error,
        attempts=attempts,
        key=key if effect else "",
        duration_ms=duration_ms,
        args=args,
        cost_usd=cost_usd,
    )
    data["held"] = True
    with transaction.atomic():
        run = owned.locked(work)
        if cost_usd:
            counters["cost_usd"] = run.cost_usd + cost_usd
        step = run.append_step(
            Step.Kind.TOOL, data, update=counters, latency_ms=duration_ms, cost_usd=cost_usd
        )
        if effect is not None:
            SideEffect.objects.filter(pk=effect.pk).update(
                status=SideEffect.Status.FAILED, result={"error": error}
            )
        recovery = Recovery.objects.create(
            run=run,
            failed_seq=step.seq,
            tool=tool.name,
            tool_use_id=item["id"],
            args=args,
            error=error,
        )
        item["recovery"] = recovery.pk
        work.run = run
        owned.write_checkpoint(work)
        run.park(
            f"waiting for an operator: {tool.name} failed",
            reason="a step failed",
            note=f"{tool.name} failed; an operator chooses: retry, skip or instruct",
        )
    raise Stop


def apply_choice(work: Work, item: dict) -> dict:
    """The pending call whose failure was held: the operator's choice applied. A retry sets
    the call up again (StepAgain); a skip or an instruction gives what the call's tool step
    records (ledger.record_tool_result's keywords); with no choice yet the run parks again."""
    recovery = Recovery.objects.select_related("decided_by").get(pk=item["recovery"])
    if recovery.status == Recovery.Status.OPEN:
        _park_for_choice(work, f"{recovery.tool} failed")
    del item["recovery"]
    by = recovery.decided_by.get_username() if recovery.decided_by else "an operator"
    if recovery.choice == Recovery.Choice.RETRY:
        # A new attempt under a key of its own (the ledger recorded the failed one), asked
        # of the gate policy again: an edit, or an approval given before, approves nothing.
        item["retry_of"] = recovery.pk
        # Its approval, if gated, belongs to this attempt (one approval per call and step).
        item["llm_seq"] = recovery.failed_seq
        if recovery.edited_args is not None:
            item["args"] = recovery.edited_args
        item.update({"approval": None, "regate": True})
        raise StepAgain
    if recovery.choice == Recovery.Choice.SKIP:
        note = recovery.note or "skipped by an operator"
        return {"result": {"skipped_by": by, "note": note}, "attempts": 0, "counts_as_error": False}
    # INSTRUCT: the agent is told the failure; the instruction (an Instruction made with the
    # choice) comes at the next model turn.
    work.instructions_waiting = True
    return {"error": recovery.error, "attempts": 0, "counts_as_error": False, "args": recovery.args}


# --- too many consecutive errors, for an agent that asks ----------------------------------------
ERRORS = "errors_recovery"  # work.state: the Recovery a run holding its errors waits on


def errors_choice(work: Work) -> None:
    """Before a model call of an agent declared on_failure="ask": past its consecutive
    errors, the run waits for an operator (retry: the model is asked again, the count reset
    by the choice's write; instruct: with an instruction) instead of failing."""
    if not asks_on_failure(work):
        return
    held = work.state.get(ERRORS)
    if held is not None:
        recovery = Recovery.objects.get(pk=held)
        if recovery.status == Recovery.Status.OPEN:
            _park_for_choice(work, "too many consecutive errors")
        del work.state[ERRORS]  # checkpointed with the next step
        if recovery.choice == Recovery.Choice.INSTRUCT:
            work.instructions_waiting = True
        work.run.consecutive_errors = 0  # the choice's write reset it
        return
    run = work.run
    if run.consecutive_errors < run.max_consecutive_errors:
        return
    detail = f"{run.consecutive_errors} consecutive errors (limit {run.max_consecutive_errors})"
    with transaction.atomic():
        locked = owned.locked(work)
        recovery = Recovery.objects.create(
            run=locked, failed_seq=locked.last_seq, tool="", tool_use_id="", args={}, error=detail
        )
        work.state[ERRORS] = recovery.pk
        work.run = locked
        owned.write_checkpoint(work)
        locked.park(
            f"waiting for an operator: {detail}",
            reason="a step failed",
            note=f"{detail}; an operator chooses: retry or instruct",
        )
    raise Stop


def _park_for_choice(work: Work, what: str) -> None:
    with transaction.atomic():
        run = owned.locked(work)
        run.park(f"waiting for an operator: {what}", reason="a step failed")
        work.run = run
    raise Stop


def _username(user_id: int | None) -> str:
    if user_id is None:
        return "an operator"
    user = get_user_model().objects.filter(pk=user_id).first()
    return user.get_username() if user else "an operator"
