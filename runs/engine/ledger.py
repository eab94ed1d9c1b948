"""The idempotency ledger: a call with side effects happens once, whatever crashes.

Its intent (SideEffect) is committed before the call, its outcome with the call's tool step
after it. On resume a committed effect is never repeated (its recorded outcome is reported
again); an intent without an outcome is retried with the same key when the tool honours
keys, otherwise a person is asked whether it happened ("outcome unknown"), and only their
explicit "did not happen" runs it again, once. An infrastructure error from a tool that
cannot de-duplicate is the same situation. Also records any call's result as its own step.
"""

from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from agentkit.tools import Tool

from .. import sql
from ..models import SideEffect, Step
from . import gates, lease, owned, rate_limited, steering, tool_calls
from .conversation import tool_result_block
from .idempotency import idempotency_key
from .owned import StepAgain, Stop, Work, renewal
from .tool_calls import OutcomeUnknown, error_counters, tool_step

_RECORDED = (SideEffect.Status.COMMITTED, SideEffect.Status.FAILED)
# A new intent's columns (its status and attempts are the model's defaults).
INTENT_COLUMNS = (
    "key",
    "run",
    "step_seq",
    "tool",
    "args",
    "status",
    "attempts",
    "created_at",
    "updated_at",
)


def execute(work: Work, item: dict, tool: Tool, args: dict) -> None:
    """Run a pending call (through the ledger when it has side effects) and record it."""
    run = work.run
    if item.get("key"):
        # A compensating call: its key derives from the effect it undoes (compensating.py),
        # so no run, however many ask, makes it twice.
        key = item["key"]
    else:
        key = idempotency_key(
            run.pk, item["llm_seq"], item["index"], tool.name, args, retry_of=item.get("retry_of")
        )
    effect = None
    if tool.has_side_effects:
        refused = rate_limited.admit(work, item, tool, key)
        if refused:
            record_tool_result(work, item, error=refused, attempts=0)
            return
        effect = _intent(work, item, tool, args, key)
        if effect is None:
            return  # recorded before a crash: reported again, never run again
    try:
        result, error, attempts, duration_ms, cost = tool_calls.call_tool(
            work,
            tool,
            args,
            key,
            run.retry_count,
            retry_blindly=effect is None or tool.accepts_idempotency_key,
            call_id=item.get("id", ""),
        )
    except OutcomeUnknown as exc:
        item["unknown_because"] = str(exc)  # the question says why (a timeout, a dropped call)
        assert effect is not None  # raised only for a call that could not retry blindly
        outcome_unknown(work, item, tool, effect)
    error, guard = tool_calls.guard_output(tool, item, result, error)
    if error is not None and guard is None and steering.asks_on_failure(work):
        steering.hold_failure(
            work,
            item,
            tool,
            args,
            error=error,
            attempts=attempts,
            key=key,
            effect=effect,
            duration_ms=duration_ms,
            cost_usd=cost,
        )
    record_tool_result(
        work,
        item,
        guard=guard,
        result=result,
        error=error,
        attempts=attempts,
        key=key if effect else "",
        ledger=effect,
        duration_ms=duration_ms,
        args=args,
        cost_usd=cost,
    )


def _intent(work: Work, item: dict, tool: Tool, args: dict, key: str) -> SideEffect | None:
    """The ledger entry the call is about to run under, committed before it runs; None when
    the call's outcome was recorded before a crash (then it is recorded again as the step)."""
    now = timezone.now()
    effect = SideEffect(
        key=key,
        run=work.run,
        step_seq=item["llm_seq"],
        tool=tool.name,
        args=args,
        created_at=now,
        updated_at=now,
    )
    # The usual case, a first attempt, is this one statement; a key that is there already
    # (a resumed call) is read after it.
    if sql.insert(effect, INTENT_COLUMNS, conflict=("key",)):
        return effect
    effect = SideEffect.objects.get(key=key)
    if effect.status in _RECORDED:
        stored = effect.result or {}
        record_tool_result(
            work,
            item,
            result=stored.get("result"),
            error=stored.get("error"),
            attempts=effect.attempts,
            key=key,
            args=args,
            cost_usd=Decimal(stored.get("cost_usd") or 0),
        )
        return None
    # An intent without an outcome: a worker died between the call and its record.
    cleared = item.get("cleared_at_attempt") == effect.attempts
    if not (cleared or tool.accepts_idempotency_key):
        item.pop("unknown_because", None)  # this time the worker stopped
        outcome_unknown(work, item, tool, effect)
    SideEffect.objects.filter(pk=effect.pk).update(
        status=SideEffect.Status.INTENT, attempts=F("attempts") + 1
    )
    effect.attempts += 1
    return effect


def outcome_unknown(work: Work, item: dict, tool: Tool, effect: SideEffect) -> None:
    """An intent without an outcome, for a tool that cannot de-duplicate: ask a person.
    Never returns: the run parks (Stop), or, answered already, the step starts again."""
    with transaction.atomic():
        run = owned.locked(work)
        SideEffect.objects.filter(pk=effect.pk).update(status=SideEffect.Status.UNKNOWN)
        item["approval"] = gates.current().open_outcome_question(run, item, tool, effect)
        owned.write_checkpoint(work)
        work.run = run
    lease.park_for_humans(work)
    raise StepAgain  # answered already: the next step applies the answer


def resolve_unknown_outcome(work: Work, item: dict, decision: gates.Decision) -> dict | None:
    """Apply a person's answer to "did it happen?": the arguments to run again (only on an
    explicit "did_not_happen"), or None when the answer itself was recorded as the result."""
    assert decision.side_effect_id is not None  # an outcome question names its ledger entry
    effect = SideEffect.objects.get(pk=decision.side_effect_id)
    answer = decision.answer.strip().lower()
    # Only an explicit "did not happen" repeats an effect that cannot be de-duplicated; any
    # other answer (including an unclear one) keeps it at most once.
    if answer != "did_not_happen":
        result = {
            "outcome": "confirmed by an operator" if answer == "happened" else "not repeated",
            "answer": decision.answer,
            "confirmed_by": decision.by,
        }
        with transaction.atomic():
            SideEffect.objects.filter(pk=effect.pk).update(
                status=SideEffect.Status.COMMITTED, result=result
            )
        record_tool_result(
            work, item, result=result, attempts=effect.attempts, key=effect.key, args=effect.args
        )
        return None
    # Run it again under the same key, once. If this attempt dies too, the attempt count
    # moves on and a person is asked again.
    with transaction.atomic():
        owned.locked(work)
        item["approval"] = None
        item["cleared_at_attempt"] = effect.attempts
        owned.write_checkpoint(work)
    # The ledger holds the arguments that really ran (an approver may have edited them).
    return effect.args


def record_tool_result(
    work: Work,
    item: dict,
    *,
    ledger: SideEffect | None = None,
    guard: dict | None = None,
    **call: Any,
) -> None:
    """Record a call (tool_step's keywords) as a step of its own, with its ledger outcome
    when it has an entry there, and the guard step when its result broke the tool's output
    schema (the model sees an error; the ledger keeps what the call did return)."""
    counters = error_counters(work.run)
    if guard is not None:
        returned, call["result"] = call.get("result"), None
    data = tool_step(counters, item, **call)
    outcome: dict[str, Any]
    if guard is not None:
        data["rejected_output"] = returned
        outcome = {"status": SideEffect.Status.COMMITTED, "result": {"result": returned}}
    else:
        outcome = {
            "status": SideEffect.Status.FAILED if data["is_error"] else SideEffect.Status.COMMITTED,
            "result": {"error": data["error"]} if data["is_error"] else {"result": data["result"]},
        }
    cost = call.get("cost_usd") or Decimal(0)
    if cost:
        # Kept with the outcome: a call recorded again after a crash is charged once, here.
        outcome["result"]["cost_usd"] = str(cost)
    work.state["pending"] = pending = work.state["pending"][1:]
    tool_calls.check_after(work, item, data)
    update = {**counters, **renewal(model_call_next=not pending)}
    if cost:
        update["cost_usd"] = work.run.cost_usd + cost
    try:
        # With a ledger entry, its outcome commits with the step, in the step's one statement.
        owned.append(
            work,
            Step.Kind.TOOL,
            data,
            update,
            checkpoint=True,
            also=[(SideEffect, outcome, {"id": ledger.pk})] if ledger is not None else [],
            then=((Step.Kind.GUARD, guard, {}),) if guard is not None else (),
            latency_ms=data["duration_ms"],
            cost_usd=cost,
        )
    except Stop:
        # Cancelled (or taken over) while the call was in flight: the effect happened all
        # the same, so the ledger must say so, or a resume would doubt or repeat it.
        if ledger is not None:
            SideEffect.objects.filter(pk=ledger.pk, status=SideEffect.Status.INTENT).update(
                **outcome
            )
        raise
    work.add_tool_result(tool_result_block(data))
