"""Tool approval for the OpenAI Agents SDK, decided in agentops.

Two ways, by what the approver may do:

- `gated(session, fn)` wraps a tool function so every call asks agentops first and runs with
  exactly the approved arguments, an approver's edit included; a rejection becomes the tool's
  output (the model reads who rejected it and why). Use it as
  `function_tool(gated(session, refund))`: the wrapper keeps the function's name, docstring
  and signature, from which the SDK builds the tool's schema.
- `decide_interruptions(session, result)` answers the SDK's own human-in-the-loop flow
  (`function_tool(..., needs_approval=True)`, `result.interruptions`, `RunState.approve` /
  `reject`): each interruption is decided in agentops. That flow cannot run edited
  arguments, so an edited approval is rejected with the approver's arguments in the message
  (the model may propose them again); use `gated` where approvers edit.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from typing import Any

from .claude import deny_message
from .client import Session

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
    session: Session,
    fn: Callable | None = None,
    *,
    tool_name: str | None = None,
    hints: dict | None = None,
    summary: str | Callable[[dict], str] = "",
    timeout: float = 3600,
) -> Callable:
    """`fn` asking agentops before each call (also usable as `@gated(session, hints=...)`)."""
    if fn is None:
        return lambda f: gated(
            session, f, tool_name=tool_name, hints=hints, summary=summary, timeout=timeout
        )
    name = tool_name or fn.__name__
    signature = inspect.signature(fn)

    def decide(args: tuple, kwargs: dict):
        call, context = _call_args(signature, args, kwargs)
        text = (
            summary(call)
            if callable(summary)
            else (summary or f"{name} requested by an OpenAI agent")
        )
        decision = session.request_approval(name, call, hints=hints, summary=text, timeout=timeout)
        return decision, context

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            import asyncio

            decision, context = await asyncio.to_thread(decide, args, kwargs)
            if not decision.approved:
                return f"Not run. {deny_message(decision)}"
            result = await fn(**context, **decision.args)
            session.report(decision, result=_jsonable(result))
            return result

        return async_wrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        decision, context = decide(args, kwargs)
        if not decision.approved:
            return f"Not run. {deny_message(decision)}"
        result = fn(**context, **decision.args)
        session.report(decision, result=_jsonable(result))
        return result

    return wrapper


def decide_interruptions(
    session: Session, result: Any, *, hints: dict | None = None, timeout: float = 3600
) -> Any:
    """Decide every pending tool approval of an interrupted run in agentops; returns the
    RunState to resume with (`Runner.run(agent, state)`)."""
    state = result.to_state()
    for item in result.interruptions:
        name = getattr(item, "name", None) or getattr(item.raw_item, "name", "")
        raw = getattr(item, "arguments", None) or getattr(item.raw_item, "arguments", "") or "{}"
        args = json.loads(raw) if isinstance(raw, str) else dict(raw)
        decision = session.request_approval(
            name,
            args,
            hints=(hints or {}).get(name),
            summary=f"{name} requested by an OpenAI agent",
            timeout=timeout,
        )
        if decision.approved and not decision.edited:
            state.approve(item)
        elif decision.approved:
            _reject(
                state,
                item,
                f"An approver changed the arguments; propose the call again with: "
                f"{json.dumps(decision.args, sort_keys=True)}",
            )
        else:
            _reject(state, item, deny_message(decision))
    return state


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
