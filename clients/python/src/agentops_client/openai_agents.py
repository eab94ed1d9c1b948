"""Tool approval for the OpenAI Agents SDK, decided in agentops.

Two ways, by what the approver may do:

- `gated(session, fn)` wraps a tool function so every call asks agentops first and runs with
  exactly the approved arguments, an approver's edit included; a rejection becomes the tool's
  output (the model reads who rejected it and why). Use it as
  `function_tool(gated(session, refund), timeout_seconds=…)`: the wrapper keeps the
  function's name, docstring and signature, from which the SDK builds the tool's schema (and
  validates the model's arguments); it is async, so the SDK's timeout applies to it and a
  call the SDK abandons is withdrawn, never run. Results and exceptions are reported.
- `decide_interruptions(session, result)` answers the SDK's own human-in-the-loop flow
  (`function_tool(..., needs_approval=True)`, `result.interruptions`, `RunState.approve` /
  `reject`): each interruption is decided in agentops, and `report_results(result)` reports
  the approved calls' outputs after the run resumes. That flow cannot run edited arguments,
  so an edited approval is withdrawn in agentops and rejected in the SDK with the
  approver's arguments in the message (the model may propose them again); use `gated`
  where approvers edit.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .claude import call_session, decide_async, deny_message
from .client import Decision, Session

if TYPE_CHECKING:  # the asyncio client needs httpx; a Session needs nothing
    from .aio import AsyncSession

# Reports under way: the event loop keeps only weak references to its tasks.
reports: set[asyncio.Task] = set()

# Parameters the SDK fills in itself (the run context): not arguments of the call.
CONTEXT_PARAMS = ("ctx", "context", "wrapper")


def _call_args(signature: inspect.Signature, args: tuple, kwargs: dict) -> tuple[dict, dict]:
    """(the call's arguments as agentops sees them, the context parameters)."""
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    context = {k: v for k, v in bound.arguments.items() if k in CONTEXT_PARAMS}
    call = {k: v for k, v in bound.arguments.items() if k not in CONTEXT_PARAMS}
    return call, context


def gated(
    session: Session | AsyncSession,
    fn: Callable | None = None,
    *,
    tool_name: str | None = None,
    hints: dict | None = None,
    summary: str | Callable[[dict], str] = "",
    timeout: float = 3600,
) -> Callable:
    """`fn` asking agentops before each call (also usable as `@gated(session, hints=...)`).

    The wrapper is a coroutine function whatever `fn` is, so the SDK awaits it and its
    per-tool timeout (`function_tool(..., timeout_seconds=…)`) or a cancelled run cancels the
    wait: the call is then withdrawn in agentops (its approval says "withdrawn by the agent")
    and `fn` never runs, even if a person approves it later. `fn` runs only once approved,
    with exactly the approved arguments; what it returns, or the exception it raises, is
    reported to the session (the exception is raised on to the SDK as well)."""
    if fn is None:
        return lambda f: gated(
            session, f, tool_name=tool_name, hints=hints, summary=summary, timeout=timeout
        )
    name = tool_name or fn.__name__
    signature = inspect.signature(fn)
    is_async = inspect.iscoroutinefunction(fn)

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        call, context = _call_args(signature, args, kwargs)
        text = (
            summary(call)
            if callable(summary)
            else (summary or f"{name} requested by an OpenAI agent")
        )
        decision = await decide_async(
            session, name, call, hints=hints, summary=text, timeout=timeout
        )
        if not decision.approved:
            return f"Not run. {deny_message(decision)}"
        started = time.monotonic()
        if is_async:
            work = asyncio.ensure_future(fn(**context, **decision.args))
        else:
            work = asyncio.ensure_future(asyncio.to_thread(fn, **context, **decision.args))

        # Whatever becomes of this await (a timeout may cancel it while a sync tool's thread
        # goes on), what the tool did is reported once it is done.
        def report(done: asyncio.Future) -> None:
            task = asyncio.ensure_future(_report(session, decision, done, started))
            reports.add(task)
            task.add_done_callback(reports.discard)

        work.add_done_callback(report)
        return await work

    return wrapper


async def _report(
    session: Session | AsyncSession, decision: Decision, done: asyncio.Future, started: float
) -> None:
    """What the tool did, on the session's timeline (a Session's request in a thread)."""
    duration_ms = int((time.monotonic() - started) * 1000)
    if done.cancelled():
        return  # an async tool cancelled before it finished: nothing to say it did
    error = done.exception()
    if error is not None:
        report = functools.partial(
            session.report, error=f"{type(error).__name__}: {error}", duration_ms=duration_ms
        )
    else:
        report = functools.partial(
            session.report, result=_jsonable(done.result()), duration_ms=duration_ms
        )
    try:
        await call_session(report, decision)
    except Exception:  # a report that fails must not hide the tool's own outcome
        logging.getLogger("agentops_client").exception("reporting %s failed", decision.call_id)


def decide_interruptions(
    session: Session, result: Any, *, hints: dict | None = None, timeout: float = 3600
) -> Any:
    """Decide every pending tool approval of an interrupted run in agentops; returns the
    RunState to resume with (`Runner.run(agent, state)`); then `report_results(result)`.

    Each interruption is submitted with the SDK's tool call id as its id in agentops (a
    restarted driver waits on the same approvals), all of them before waiting, so people see
    them together. The SDK's approval flow runs the model's own arguments or nothing: an
    approver's edit cannot be run through it, so an edited approval is withdrawn in agentops
    (the timeline says why; agentops never records it as run) and rejected in the SDK with
    the approver's arguments in the message, for the model to propose again. Use `gated`
    where approvers edit."""
    state = result.to_state()
    submitted = []
    for item in result.interruptions:
        raw = getattr(item, "raw_item", None)
        name = str(getattr(item, "name", None) or getattr(raw, "name", ""))
        arguments = getattr(item, "arguments", None) or getattr(raw, "arguments", "") or "{}"
        args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
        sdk_id = getattr(raw, "call_id", None) or ""
        answer = session.submit(
            name,
            args,
            hints=(hints or {}).get(name),
            summary=f"{name} requested by an OpenAI agent",
            call_id=f"openai:{sdk_id}" if sdk_id else "",
        )
        submitted.append((item, sdk_id, answer))
    waiting = [a["call"] for _, _, a in submitted if a["status"] == "pending"]
    decided = session.wait_all(waiting, timeout=timeout) if waiting else {}
    for item, sdk_id, answer in submitted:
        decision = decided.get(answer["call"]) or Decision.from_json(answer)
        if decision.approved and not decision.edited:
            state.approve(item)
            if sdk_id:
                _APPROVED[sdk_id] = (session, decision)
        elif decision.approved:
            session.withdraw(
                decision.call_id,
                reason="the OpenAI Agents SDK's approval flow cannot run edited arguments; "
                "the model was asked to propose them again",
            )
            _reject(
                state,
                item,
                f"An approver changed the arguments; propose the call again with: "
                f"{json.dumps(decision.args, sort_keys=True)}",
            )
        else:
            _reject(state, item, deny_message(decision))
    return state


# The SDK's tool call id -> (session, decision) of calls approved through
# decide_interruptions, for report_results (this process).
_APPROVED: dict[str, tuple[Session, Decision]] = {}


def report_results(result: Any) -> int:
    """After `Runner.run(agent, state)`: report the outputs of the tool calls approved by
    decide_interruptions to their sessions. Returns how many were reported."""
    reported = 0
    for item in getattr(result, "new_items", []):
        if getattr(item, "type", "") != "tool_call_output_item":
            continue
        raw = item.raw_item
        sdk_id = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
        found = _APPROVED.pop(sdk_id or "", None)
        if found is not None:
            session, decision = found
            session.report(decision, result=_jsonable(item.output))
            reported += 1
    return reported


def _reject(state: Any, item: Any, message: str) -> None:
    # Newer SDKs take the message the model reads; older ones only the item.
    try:
        state.reject(item, rejection_message=message)
    except TypeError:
        state.reject(item)


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value
