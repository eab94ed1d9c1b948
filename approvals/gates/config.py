"""A gate configuration that cannot be understood refuses to start: it never runs ungated.
Pure rules: this module imports no model (tests/test_layering.py).
Why and how: docs/design/modules.md."""

from collections.abc import Iterable
from typing import Any

from agentkit.agents import GateRules
from agentkit.tools import Blast

KNOWN_KEYS = frozenset(GateRules().as_dict())
# The approver groups an escalation tier may name: accounts.models.Role's values (a test holds
# them equal; this module imports no model).
ROLES = ("viewer", "operator", "approver", "admin")
EXPIRY_OUTCOMES = ("reject", "fail", "halt")
# The expiry defaults are declared once, with the rest of an agent's gate rules (GateRules);
# approvals reads them from here for snapshots without the key.
APPROVAL_TIMEOUT = GateRules.approval_timeout
ON_EXPIRY = GateRules.on_expiry
BLAST_LABELS = tuple(b.label for b in Blast)
LEARNING_KEYS = frozenset(
    (
        "bar",
        "bands",
        "match_fields",
        "check_rate",
        "sample_rate",
        "default_expiry_seconds",
        "default_max_hits",
    )
)


def problems(snapshot: dict, *, existing_users: set[str] | None = None) -> list[str]:
    """Every rule of `snapshot["gates"]` that names what is not there, or means nothing the
    policy knows; [] when the configuration is sound.

    An external agent (`snapshot["external"]`) may call tools it never registered (judged
    by their hints, gated by default), so a rule may name one of those; its rules on the
    arguments of a registered tool are checked against that tool's schema all the same.

    With `existing_users` (the usernames of active accounts among those the rules name, see
    `named_users`), a named approver or escalation user without an account is a problem too:
    an approval only they may decide would wait for nobody."""
    gates = snapshot.get("gates")
    if not isinstance(gates, dict):
        return ["gates must be an object (GateRules.as_dict())"]
    # The tools that compensate the agent's calls are gated by its rules too.
    declared = [*snapshot.get("tools", []), *snapshot.get("compensating_tools", [])]
    tools = {t["name"]: t.get("input_schema") or {} for t in declared}
    found = [f"unknown key {key!r}" for key in sorted(set(gates) - KNOWN_KEYS)]

    open_tools = bool(snapshot.get("external"))
    # An MCP server that could not be listed: its tools are unknown now, not wrong.
    unlisted = [s["prefix"] for s in snapshot.get("mcp", []) if "error" in s and s.get("prefix")]

    def tool_named(where: str, name: Any) -> bool:
        if name in tools:
            return True
        if isinstance(name, str) and (
            open_tools or any(name.startswith(prefix) for prefix in unlisted)
        ):
            return False  # unregistered: its arguments are not known here
        known = ", ".join(sorted(tools)) or "none"
        found.append(f"{where} names unknown tool {name!r} (the agent's tools: {known})")
        return False

    def argument_named(where: str, tool: str, argument: Any) -> None:
        declared = (tools[tool].get("properties") or {}).keys()
        if argument not in declared:
            known = ", ".join(sorted(declared)) or "none"
            found.append(
                f"{where} names argument {argument!r} that tool {tool!r} does not take "
                f"(its arguments: {known})"
            )

    for key in ("always_gate", "never_gate"):
        for name in _names(gates.get(key)):
            tool_named(key, name)
    for key in ("thresholds", "allow_lists"):
        for tool, arguments in _items(gates.get(key)):
            if tool_named(key, tool):
                for argument, _ in _items(arguments):
                    argument_named(f"{key}[{tool!r}]", tool, argument)
    for tool, rate in _items(gates.get("sample_rates")):
        tool_named("sample_rates", tool)
        found += _rate(f"sample_rates[{tool!r}]", rate)
    found += _rate("sample_rate", gates.get("sample_rate", 0))
    per_day = gates.get("review_per_day")
    if per_day is not None and (
        isinstance(per_day, bool) or not isinstance(per_day, int) or not 0 <= per_day <= 10_000
    ):
        found.append(f"review_per_day must be a whole number from 0 to 10000, not {per_day!r}")
    if gates.get("confidence_threshold") is not None:
        found += _rate("confidence_threshold", gates["confidence_threshold"])
    if gates.get("on_expiry", ON_EXPIRY) not in EXPIRY_OUTCOMES:
        found.append(
            f"on_expiry {gates['on_expiry']!r} is not an outcome the expiry knows "
            f"({' or '.join(EXPIRY_OUTCOMES)})"
        )
    reminders = gates.get("reminders", [])
    if not isinstance(reminders, list | tuple):
        found.append("reminders must be a list of shares of the approval's time left")
    else:
        for index, share in enumerate(reminders):
            found += _share_left(f"reminders[{index}]", share)
    found += _rate("remind_before_escalation", gates.get("remind_before_escalation", 0))
    for key in ("four_eyes_from", "quorum_from"):
        if gates.get(key, "") not in ("", *BLAST_LABELS):
            found.append(f"{key} {gates[key]!r} is not a blast radius ({', '.join(BLAST_LABELS)})")
    if gates.get("quorum_from") and int(gates.get("quorum") or 0) < 1:
        found.append("quorum must be at least 1")
    for index, tier in enumerate(gates.get("escalation") or []):
        for role in tier.get("roles", []):
            if role not in ROLES:
                found.append(
                    f"escalation tier {index + 1} names unknown approver group {role!r} "
                    f"(groups: {', '.join(ROLES)})"
                )
    if existing_users is not None:
        for name in sorted(named_users(gates) - existing_users):
            found.append(f"names approver {name!r}, who has no active account")
    learning = gates.get("learning")
    if isinstance(learning, dict):
        found += [f"unknown learning key {k!r}" for k in sorted(set(learning) - LEARNING_KEYS)]
        for tool, fields in _items(learning.get("match_fields")):
            if tool_named("learning.match_fields", tool):
                for argument in _names(fields):
                    argument_named(f"learning.match_fields[{tool!r}]", tool, argument)
    return found


def named_users(gates: dict) -> set[str]:
    """The usernames the rules name: approvers, and the users of escalation tiers."""
    names = {n for n in _names(gates.get("approvers")) if isinstance(n, str)}
    for tier in gates.get("escalation") or []:
        names |= {n for n in _names(tier.get("users")) if isinstance(n, str)}
    return names


def _names(value: Any) -> Iterable:
    return value if isinstance(value, list | tuple) else ()


def _items(value: Any) -> Iterable[tuple[Any, Any]]:
    return value.items() if isinstance(value, dict) else ()


def _rate(where: str, value: Any) -> list[str]:
    try:
        ok = 0 <= float(value) <= 1
    except (TypeError, ValueError):
        ok = False
    return [] if ok else [f"{where} must be a share between 0 and 1, not {value!r}"]


def _share_left(where: str, value: Any) -> list[str]:
    # A reminder at 0 % or 100 % left would go out at the deadline or at once: both mean nothing.
    try:
        ok = 0 < float(value) < 1
    except (TypeError, ValueError):
        ok = False
    return (
        [] if ok else [f"{where} must be a share of the time left between 0 and 1, not {value!r}"]
    )
