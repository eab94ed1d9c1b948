"""A permission hook for the Claude Agent SDK: every tool use is decided by agentops.

    from claude_agent_sdk import ClaudeAgentOptions
    from agentops_client.claude import can_use_tool

    options = ClaudeAgentOptions(can_use_tool=can_use_tool(session, hints={"Bash": HIGH}))

The SDK calls `can_use_tool(tool_name, input, context)` before a tool runs; the hook submits
the call to agentops and answers PermissionResultAllow(updated_input=<the approved args>)
(an approver's edit included) or PermissionResultDeny(message=<who rejected it and why>).
The SDK's types are imported when the hook answers; without the SDK installed, stand-ins of
the same names and fields are returned (for tests and other hosts).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .client import Decision, Session

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
    session: Session,
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
        call_hints = (
            hints(tool_name, tool_input) if callable(hints) else (hints or {}).get(tool_name)
        )
        text = (
            summary(tool_name, tool_input) if summary else f"Claude agent wants to use {tool_name}"
        )
        decision = await asyncio.to_thread(
            session.request_approval,
            tool_name,
            dict(tool_input),
            hints=call_hints,
            summary=text,
            timeout=timeout,
        )
        allow, deny = _result_types()
        if decision.approved:
            return allow(updated_input=decision.args)
        return deny(message=deny_message(decision), interrupt=interrupt_on_reject)

    return callback


__all__ = ["PermissionResultAllow", "PermissionResultDeny", "can_use_tool", "deny_message"]
