"""The Claude Agent SDK's tool uses, decided by agentops. Two ways, by what must be seen:

- `hooks(session)`, for `ClaudeAgentOptions(hooks=hooks(session))`: a PreToolUse hook that
  sees **every** tool use (the CLI runs hooks before its own permission rules) and answers
  allow with the approved input, or deny with who refused and why; and PostToolUse /
  PostToolUseFailure hooks that report each approved call's result or error to the session.
  The tool_use_id is the call's id in agentops, so a retried hook (or a restarted agent)
  waits on the same approval instead of opening another.
- `can_use_tool(session)`, for `ClaudeAgentOptions(can_use_tool=...)`: the permission
  callback. The CLI calls it **only when its own rules would prompt** (a `Read` inside the
  working directory, or a tool an allow rule covers, never reaches it), so agentops does not
  see those calls; results are not reported. Its summary for the approver is the
  permission context's title and description, its id the context's tool_use_id.

The SDK's types are imported when an answer is made; without the SDK installed, stand-ins of
the same names and fields are returned (for tests and other hosts).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .client import Decision, Session

if TYPE_CHECKING:  # the asyncio client needs httpx; a Session needs nothing
    from .aio import AsyncSession

Hints = dict | Callable[[str, dict], "dict | None"] | None


@dataclass
class PermissionResultAllow:
    """Stand-in for claude_agent_sdk.PermissionResultAllow (same fields)."""

    behavior: str = "allow"
    updated_input: dict | None = None
    updated_permissions: list | None = None


@dataclass
class PermissionResultDeny:
    """Stand-in for claude_agent_sdk.PermissionResultDeny (same fields)."""

    behavior: str = "deny"
    message: str = ""
    interrupt: bool = False


def _result_types() -> tuple[Any, Any]:
    try:
        from claude_agent_sdk import PermissionResultAllow as Allow
        from claude_agent_sdk import PermissionResultDeny as Deny
    except ImportError:
        return PermissionResultAllow, PermissionResultDeny
    return Allow, Deny


def deny_message(decision: Decision) -> str:
    by = f" by {decision.decided_by}" if decision.decided_by else ""
    why = f": {decision.reason}" if decision.reason else ""
    return f"agentops: {decision.status}{by}{why}"


def can_use_tool(
    session: Session | AsyncSession,
    *,
    hints: Hints = None,
    summary: Callable[[str, dict], str] | None = None,
    timeout: float = 3600,
    interrupt_on_reject: bool = False,
) -> Callable[[str, dict, Any], Any]:
    """The `can_use_tool` callback. `hints`: per tool name {"reversible", "blast"}, or a
    function (tool_name, input) -> hints. `summary`: (tool_name, input) -> the text the
    approver reads. `interrupt_on_reject` stops the whole SDK session on a rejection."""

    async def callback(tool_name: str, tool_input: dict, context: Any = None) -> Any:
        title = getattr(context, "title", None) or ""
        detail = getattr(context, "description", None) or ""
        if summary:
            text = summary(tool_name, tool_input)
        else:
            text = " - ".join(t for t in (title, detail) if t)
            text = text or f"Claude agent wants to use {tool_name}"
        use_id = getattr(context, "tool_use_id", None) or ""
        decision = await decide_async(
            session,
            tool_name,
            dict(tool_input),
            hints=_hints_for(hints, tool_name, tool_input),
            summary=text,
            timeout=timeout,
            call_id=f"claude:{use_id}" if use_id else "",
        )
        allow, deny = _result_types()
        if decision.approved:
            return allow(updated_input=decision.args)
        return deny(message=deny_message(decision), interrupt=interrupt_on_reject)

    return callback


def _hints_for(hints: Hints, tool_name: str, tool_input: dict) -> dict | None:
    return hints(tool_name, tool_input) if callable(hints) else (hints or {}).get(tool_name)


def hooks(
    session: Session | AsyncSession,
    *,
    hints: Hints = None,
    summary: Callable[[str, dict], str] | None = None,
    timeout: float = 3600,
    matcher: str | None = None,
) -> dict[str, list]:
    """`ClaudeAgentOptions(hooks=...)`: every tool use (or those `matcher` names, e.g.
    "Bash|Write") decided in agentops before it runs, and its result or error reported after.
    The hooks' own timeout is `timeout` (the CLI's default, 60 s, would cut a person short)."""
    decided: dict[str, Decision] = {}

    async def pre_tool_use(input_data: dict, tool_use_id: str | None, context: Any) -> dict:
        tool_name, tool_input = input_data["tool_name"], dict(input_data.get("tool_input") or {})
        use_id = tool_use_id or input_data.get("tool_use_id") or ""
        text = summary(tool_name, tool_input) if summary else f"Claude wants to use {tool_name}"
        decision = await decide_async(
            session,
            tool_name,
            tool_input,
            hints=_hints_for(hints, tool_name, tool_input),
            summary=text,
            timeout=timeout,
            call_id=f"claude:{use_id}" if use_id else "",
        )
        output: dict[str, Any] = {"hookEventName": "PreToolUse"}
        if decision.approved:
            decided[use_id] = decision
            output.update(permissionDecision="allow", updatedInput=decision.args)
        else:
            output.update(
                permissionDecision="deny", permissionDecisionReason=deny_message(decision)
            )
        return {"hookSpecificOutput": output}

    async def post_tool_use(input_data: dict, tool_use_id: str | None, context: Any) -> dict:
        use_id = tool_use_id or input_data.get("tool_use_id") or ""
        decision = decided.pop(use_id, None)
        if decision is not None:
            duration = int(input_data.get("duration_ms") or 0)
            if input_data.get("hook_event_name") == "PostToolUseFailure":
                error = str(input_data.get("error") or "failed")
                report = functools.partial(session.report, error=error, duration_ms=duration)
            else:
                result = _jsonable(input_data.get("tool_response"))
                report = functools.partial(session.report, result=result, duration_ms=duration)
            await call_session(report, decision)
        return {}

    from claude_agent_sdk import HookMatcher

    def matched(hook: Callable[..., Any]) -> list:
        return [HookMatcher(matcher=matcher, hooks=[hook], timeout=timeout)]

    return {
        "PreToolUse": matched(pre_tool_use),
        "PostToolUse": matched(post_tool_use),
        "PostToolUseFailure": matched(post_tool_use),
    }


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


async def decide_async(
    session: Session | AsyncSession,
    tool: str,
    args: dict,
    *,
    hints: dict | None = None,
    summary: str = "",
    timeout: float = 3600,
    call_id: str = "",
) -> Decision:
    """Submit the call and await its decision; cancelled (the framework gave the call up),
    the call is withdrawn in agentops before the cancellation goes on: it never runs. An
    AsyncSession awaits its own long-poll, which a cancellation ends at once; a Session's
    waits in a thread."""
    if not isinstance(session, Session):
        return await session.request_approval(
            tool, args, hints=hints, summary=summary, timeout=timeout, call_id=call_id
        )
    answer = await asyncio.to_thread(
        session.submit, tool, args, hints=hints, summary=summary, call_id=call_id
    )
    if answer["status"] != "pending":
        return Decision.from_json(answer)
    try:
        return await asyncio.to_thread(
            session.wait_for, answer["call"], timeout=timeout, poll=CANCEL_POLL_SECONDS
        )
    except asyncio.CancelledError:
        reason = "the agent's framework gave the call up (a timeout or a cancelled run)"
        await asyncio.shield(asyncio.to_thread(session.withdraw, answer["call"], reason=reason))
        raise


async def call_session(method: Callable[..., Any], *args: Any) -> Any:
    """A session's method, awaited: an AsyncSession's at once, a Session's in a thread."""
    if inspect.iscoroutinefunction(method):
        return await method(*args)
    return await asyncio.to_thread(method, *args)


# A cancelled wait's thread stops polling within this long (a long-poll cannot be
# interrupted; the call is withdrawn at once all the same).
CANCEL_POLL_SECONDS = 5.0

__all__ = [
    "PermissionResultAllow",
    "PermissionResultDeny",
    "can_use_tool",
    "decide_async",
    "deny_message",
    "hooks",
]
