"""Tool calls: planning what the model asked for, calling a tool, and describing the call.

`plan_calls` validates every proposed call and asks the gate policy about each before any
runs. Calls without side effects run at once (`run_inline`) and are written with the model's
step; calls with side effects go through the ledger (ledger.py). `call_tool` is the one
place a tool is called: under its circuit breaker, with its deadline in its context and
enforced (deadlines.py: past it the call is abandoned and timed out), retrying
infrastructure errors as the tool's policy and the run's retry budget allow.
"""

import logging
import threading
import time
from decimal import Decimal
from typing import Any

from agentkit import tracing
from agentkit.tools import (
    Charged,
    Pending,
    Tool,
    ToolArgsError,
    ToolContext,
    ToolError,
    ToolInfraError,
    breaker,
    get_tool,
)
from agentkit.verification import checks_call, schema_errors

from ..models import Run, Step, canonical_json
from . import awaiting, deadlines, gates, lease, parallel, pii_guard, replaying, retry, terminator
from .idempotency import idempotency_key
from .owned import Work, cfg, renewal

log = logging.getLogger("agentops.engine")

ASK_OPERATOR = "ask_operator"
_opening = threading.Lock()


def plan_calls(
    work: Work, llm_seq: int, tool_uses: list[dict], response: Any
) -> tuple[list[dict], str, list[tuple[dict, dict]], list[tuple[str, dict, dict]]]:
    """Validate every proposed call, apply the agent's PII guard and ask the gate policy
    about each, before running any: (pending calls, the tool repeated without progress or
    "", the gated calls with what to ask, the guard steps). No writes: the caller opens the
    gates with the model step, so parallel calls are decided together and nothing runs until
    all are decided.
    """
    allowed = {t["name"] for t in work.agent_config["tools"]}
    pending = [_planned(work, allowed, llm_seq, index, use) for index, use in enumerate(tool_uses)]
    guarded = pii_guard.check_calls(work, pending) if "pii" in work.agent_config else []
    repeated = ""
    for item in pending:
        if item["args"] is not None and terminator.repeats(work.state, item["name"], item["args"]):
            repeated = repeated or item["name"]
    gated = []
    if not repeated:
        # Only now: a run about to stop for no progress must not leave approvals behind.
        policy = gates.current()
        for item in pending:
            if item["args"] is not None:
                tool = get_tool(item["name"])
                assert tool is not None  # its arguments were validated: the tool exists
                gate = policy.gate_for_call(work.run, item, tool, response)
                if gate is not None:
                    gated.append((item, gate))
    return pending, repeated, gated, guarded


def _planned(work: Work, allowed: set[str], llm_seq: int, index: int, use: dict) -> dict:
    """A proposed call as the run's state keeps it: validated arguments, or why not."""
    item: dict[str, Any] = {
        "id": use["id"],
        "name": use["name"],
        "input": use.get("input"),
        "llm_seq": llm_seq,
        "index": index,
        "args": None,
        "error": None,
        "approval": None,
    }
    tool = get_tool(use["name"]) if use["name"] in allowed else None
    if tool is None:
        item["error"] = f"unknown tool {use['name']!r}; available: {', '.join(sorted(allowed))}"
    else:
        try:
            item["args"] = tool.validate(use.get("input"))
        except ToolArgsError as exc:
            item["error"] = str(exc)
        else:
            if work.state.get("awaiting"):
                item["error"] = awaiting.already_open(work.state, tool.name, item["args"])
    return item


def run_inline(work: Work, pending: list[dict], counters: dict) -> tuple:
    """Run the calls at the head of `pending` that have no side effects now, before the
    model step is written, and return their tool steps to go in the same write: one commit
    per iteration instead of one per step. A worker that dies before that write loses the
    model's answer (the resumed run asks again) and runs these calls again, which changes
    nothing. `counters` (the model step's update) takes in theirs; the calls from the first
    with side effects on stay pending, for the ledger's way. The calls run together, up to
    the agent's limit (parallel.py), their steps in the order the model asked for them.

    The calls are preceded by the checks a step boundary makes for a call without side
    effects (lease.still_mine): is the run still ours (read unless confirmed less than
    RECHECK_AFTER_SECONDS ago: a model call that took longer is followed by a read, so a
    cancel during it runs none of its calls), the lease, max_seconds (past it, the calls
    left stay pending and the next step stops the run before them).
    """
    errors = error_counters(work.run)
    steps = []
    charged = Decimal(0)
    left = list(pending)
    while left:
        if not left[0]["error"] and not _runs_inline(work, left[0]):
            break
        batch = _together(work, left) if parallel.limit_for(work.agent_config) > 1 else left[:1]
        called, cost = _inline_calls(work, batch, errors)
        steps.extend(called)
        charged += cost
        del left[: len(batch)]
        if "checking" in work.state:
            break  # its check comes next, before the calls after it (answer_check.py)
    counters.update(errors)
    counters.update(renewal(model_call_next=not left))
    if charged:
        counters["cost_usd"] = counters.get("cost_usd", work.run.cost_usd) + charged
    work.state["pending"] = left
    return tuple(steps)


def _runs_inline(work: Work, item: dict) -> bool:
    tool = get_tool(item["name"])
    return not (
        item.get("approval")  # decided by a person: the ledger's way applies the decision
        or tool is None
        or tool.has_side_effects
        or tool.name == ASK_OPERATOR
        # A failure waits for an operator (steering.py): each call is a step of its own.
        or work.agent_config.get("on_failure") == "ask"
        or work.active_seconds >= work.run.max_seconds
    )


def together_next(work: Work) -> int:
    """How many of the pending calls at its head would run together now (0 or 1: none to
    run together, the ledger's way one by one)."""
    pending = work.state["pending"]
    if parallel.limit_for(work.agent_config) < 2 or not pending or pending[0]["error"]:
        return 0
    if not _runs_inline(work, pending[0]):
        return 0
    return sum(1 for item in _together(work, pending) if not item["error"])


def _together(work: Work, left: list[dict]) -> list[dict]:
    """The calls at the head of `left` that run together: calls without side effects (and
    refused calls, which run nothing), ending with the first that the agent's verifier
    checks, whose check must come before anything after it. They all start before any has
    ended, so max_seconds is checked before them, not between them as one after another."""
    batch = []
    for item in left:
        if not item["error"] and not _runs_inline(work, item):
            break
        batch.append(item)
        if not item["error"] and checks_call(work.agent_config, item["name"]):
            break
    return batch


def _inline_calls(
    work: Work, batch: list[dict], errors: dict
) -> tuple[list[tuple[str, dict, dict]], Decimal]:
    """The batch's steps (each call's tool step, and a guard step if its result broke its
    schema), in the order the model asked, and what the calls cost."""
    runnable = [item for item in batch if not item["error"]]
    outcomes: dict[str, tuple] = {}
    if runnable:
        limit = parallel.limit_for(work.agent_config)
        tools = [t for item in runnable if (t := get_tool(item["name"])) is not None]
        assert len(tools) == len(runnable)  # the calls' arguments were validated
        # The lease covers the calls' waves, each as long as its slowest call's timeout.
        waves = -(-len(runnable) // limit)
        lease.still_mine(
            work, lease_for=waves * max(t.timeout_seconds for t in tools), deadline=False
        )
        calls = [
            (
                tool,
                item["args"],
                idempotency_key(
                    work.run.pk, item["llm_seq"], item["index"], tool.name, item["args"]
                ),
            )
            for item, tool in zip(runnable, tools, strict=True)
        ]
        retry_count = errors["retry_count"]
        call_ids = {
            key: item.get("id", "") for item, (_, _, key) in zip(runnable, calls, strict=True)
        }

        def call(work: Work, tool: Tool, args: dict, key: str) -> tuple:
            return call_tool(work, tool, args, key, retry_count, call_id=call_ids[key])

        results = parallel.call_all(work, calls, call, limit=limit)
        outcomes = {
            item["id"]: (item, tool, outcome)
            for item, tool, outcome in zip(runnable, tools, results, strict=True)
        }
    steps: list[tuple[str, dict, dict]] = []
    charged = Decimal(0)
    for item in batch:
        if item["error"]:
            data = tool_step(errors, item, error=item["error"], attempts=0)
            steps.append((Step.Kind.TOOL, data, {}))
            continue
        _, tool, (result, error, attempts, duration_ms, cost) = outcomes[item["id"]]
        charged += cost
        error, guard = guard_output(tool, item, result, error)
        data = tool_step(
            errors,
            item,
            result=result,
            error=error,
            attempts=attempts,
            duration_ms=duration_ms,
            args=item["args"],
            cost_usd=cost,
        )
        steps.append((Step.Kind.TOOL, data, {"latency_ms": duration_ms, "cost_usd": cost}))
        if guard is not None:
            data["rejected_output"] = result
            steps.append((Step.Kind.GUARD, guard, {}))
        check_after(work, item, data)
    return steps, charged


def check_after(work: Work, item: dict, data: dict) -> None:
    """A successful call of a tool the agent's verifier checks: its check is due next."""
    if not data["is_error"] and checks_call(work.agent_config, item["name"]):
        work.state["checking"] = {
            "llm_seq": item["llm_seq"],
            "tool": item["name"],
            "output": canonical_json(
                {"tool": item["name"], "args": data["args"], "result": data["result"]}
            ),
        }


def guard_output(
    tool: Tool, item: dict, result: Any, error: str | None
) -> tuple[str | None, dict | None]:
    """A result that breaks the tool's declared output schema becomes an error the model
    sees, with a guard step saying why: (the call's error, the guard step's data or None).
    Tools without a schema pay one attribute read."""
    if tool.output_schema is None or error is not None or awaiting.was_pending(result):
        return error, None
    errors = schema_errors(tool.output_schema, result)
    if not errors:
        return None, None
    guard = {
        "subject": f"{tool.name} output",
        "tool": tool.name,
        "tool_use_id": item["id"],
        "check": "output schema",
        "passed": False,
        "errors": errors,
    }
    message = (
        f"{tool.name} returned a result that does not match its output schema, so it is not "
        f"used: {'; '.join(errors)}"
    )
    return message, guard


class OutcomeUnknown(Exception):
    """An infrastructure error from a tool with side effects that cannot de-duplicate a
    retry: whether the effect happened is unknown, and only a person can say (the ledger)."""


def call_tool(
    work: Work,
    tool: Tool,
    args: dict,
    key: str,
    retry_count: int,
    *,
    retry_blindly: bool = True,
    call_id: str = "",
) -> tuple[Any, str | None, int, int, Decimal]:
    """Call the tool under its circuit breaker, retrying infrastructure errors as its policy
    and the run's retries so far (`retry_count`) allow: (result, error, attempts, duration
    in ms, cost in USD). Without `retry_blindly` an infrastructure error raises
    OutcomeUnknown instead. Each attempt that reached the tool costs its declared `cost_usd`
    (a paid API bills the calls that failed too), or what the call returned as Charged.
    `call_id` (the model's tool_use id) is for the trace.
    """
    with tracing.tool_call(tool.name, call_id=call_id, side_effects=tool.has_side_effects) as span:
        called = _call_with_retries(work, tool, args, key, retry_count, retry_blindly)
        tracing.tool_returned(span, error=called[1], attempts=called[2])
        return called


def _call_with_retries(
    work: Work, tool: Tool, args: dict, key: str, retry_count: int, retry_blindly: bool
) -> tuple[Any, str | None, int, int, Decimal]:
    started, attempts, cost = time.monotonic(), 0, Decimal(0)
    while True:
        attempts += 1
        try:
            result, error, charged = _attempt(work, tool, args, key)
            cost += charged
            break
        except ToolInfraError as exc:
            cost += tool.cost_usd
            if not retry_blindly:
                # A timeout or dropped connection says nothing about whether the effect
                # happened, and this tool cannot de-duplicate a retry: a person decides.
                log.warning(
                    "run %s: %s failed with %s; outcome unknown", work.run.pk, tool.name, exc
                )
                raise OutcomeUnknown(str(exc)) from exc
            # Capped per call by the tool's policy and per run by RUN_MAX_RETRIES.
            run_budget_left = retry_count + attempts - 1 < cfg("RUN_MAX_RETRIES")
            if attempts >= tool.retry.max_attempts or not run_budget_left:
                result, error = None, f"{exc} (after {attempts} attempts)"
                break
            policy = tool.retry
            time.sleep(retry.backoff(attempts, base=policy.base_seconds, cap=policy.max_seconds))
    return result, error, attempts, int((time.monotonic() - started) * 1000), cost


def _attempt(work: Work, tool: Tool, args: dict, key: str) -> tuple[Any, str | None, Decimal]:
    """One call: (result, business error, cost). ToolInfraError, the retryable kind,
    propagates. A replay and a call the circuit breaker refuses cost nothing: no tool ran."""
    recording = replaying.current()
    if recording is not None:
        result, error = recording.tool_result(tool.name, args)
        if awaiting.was_pending(result):
            result = awaiting.open_operation(work, tool, args, key, awaiting.as_pending(result))
        return result, error, Decimal(0)
    if not breaker.allow(tool.name):
        return (
            None,
            f"{tool.name} is temporarily unavailable (circuit open after repeated failures)",
            Decimal(0),
        )
    ctx = ToolContext(
        run_id=str(work.run.pk),
        idempotency_key=key,
        deadline=time.monotonic() + tool.timeout_seconds,
    )
    try:
        # Abandoned past its deadline (deadlines.py): a ToolTimeout, retried like any
        # infrastructure error, or "outcome unknown" for an effect that cannot be repeated.
        result = deadlines.call(tool, args, ctx)
    except ToolError as exc:
        breaker.record(tool.name, ok=True)
        return None, str(exc), tool.cost_usd
    except ToolInfraError:
        breaker.record(tool.name, ok=False)
        raise
    except Exception as exc:  # a bug in a tool must not kill the run
        log.exception("tool %s crashed", tool.name)
        breaker.record(tool.name, ok=False)
        return None, f"{tool.name} failed: {type(exc).__name__}: {exc}", tool.cost_usd
    breaker.record(tool.name, ok=True)
    cost = tool.cost_usd
    if isinstance(result, Charged):
        result, cost = result.result, result.cost_usd
    if isinstance(result, Pending):
        with _opening:  # calls run together (parallel.py) share work.state
            result = awaiting.open_operation(work, tool, args, key, result)
    return result, None, cost


def error_counters(run: Run) -> dict:
    return {
        "retry_count": run.retry_count,
        "error_count": run.error_count,
        "consecutive_errors": run.consecutive_errors,
        "tool_failed_count": run.tool_failed_count,
    }


def tool_step(
    counters: dict,
    item: dict,
    *,
    result: Any = None,
    error: str | None = None,
    attempts: int,
    key: str = "",
    duration_ms: int = 0,
    counts_as_error: bool = True,
    args: dict | None = None,
    cost_usd: Decimal = Decimal(0),
) -> dict:
    """A tool step's data; moves `counters` (error_counters) on to what they are after it.
    A call's cost goes in the step's column too (the caller's); here it is shown with it."""
    is_error = error is not None
    data = {
        "tool_use_id": item["id"],
        "tool": item["name"],
        # What ran (an approver may have edited the model's arguments), else what was asked.
        "args": args if args is not None else (item["args"] or item.get("input")),
        "is_error": is_error,
        "attempts": attempts,
        "duration_ms": duration_ms,
        "idempotency_key": key,
    }
    if item.get("approval"):
        data["approval"] = item["approval"]
    if item.get("plan_step"):
        # The planned step the gate policy matched this call to ("plan:step"): the run
        # page's to-do list ticks when this step arrives.
        data["plan_step"] = item["plan_step"]
    if cost_usd:
        data["cost_usd"] = str(cost_usd)
    if is_error:
        data["error"] = error
    else:
        data["result"] = result
    counters["retry_count"] += max(0, attempts - 1)
    if is_error and counts_as_error:
        counters["tool_failed_count"] += 1
        counters["error_count"] += 1
        counters["consecutive_errors"] += 1
    elif not is_error:
        counters["consecutive_errors"] = 0
    return data
