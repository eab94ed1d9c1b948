"""A gate configuration that cannot be understood refuses to start: it never runs ungated.

The policy (approvals/declared_policy.py) reads an agent's rules by tool and argument name,
so a rule naming a tool the agent does not have, or an argument its tool does not take,
matches nothing and gates nothing: a typo'd `always_gate` entry silently lets every call of
the real tool through. `problems` finds every such rule, on the agent's snapshot
(Agent.snapshot() or ExternalAgent.snapshot(): GateRules.as_dict() beside the tools' metadata), for

- the system check below (approvals/apps.py registers it): `manage.py check --deploy`,
  `migrate` and therefore `up` refuse to start while an agent of the catalogue has one;
- an external agent's session registration (gateway/sessions.py): 422 with the reasons.
"""

from collections.abc import Iterable
from typing import Any

from django.contrib.auth import get_user_model
from django.core import checks
from django.db import DatabaseError

from accounts.models import Role
from agentkit.agents import CATALOGUE, GateRules
from agentkit.tools import Blast

KNOWN_KEYS = frozenset(GateRules().as_dict())
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
            if role not in Role.values:
                found.append(
                    f"escalation tier {index + 1} names unknown approver group {role!r} "
                    f"(groups: {', '.join(Role.values)})"
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


def existing_users(names: set[str]) -> set[str]:
    """Which of `names` are active accounts (one query)."""
    if not names:
        return set()
    users = get_user_model().objects.filter(username__in=names, is_active=True)
    return set(users.values_list("username", flat=True))


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


def check_catalogue(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """The system check: every agent of the catalogue has a gate configuration that means
    what it says (approvals.E001 names the agent and the rule)."""
    errors: list[checks.CheckMessage] = []
    for slug, agent in sorted(CATALOGUE.items()):
        try:
            snapshot = agent.snapshot()
        except Exception as exc:  # a tool missing from the registry, and the like
            found = [f"its configuration cannot be read: {exc}"]
        else:
            found = problems(snapshot)
        errors += [
            checks.Error(
                f"agent {slug!r}: {problem}",
                hint="Fix the agent's GateRules: a rule that names nothing gates nothing.",
                obj=slug,
                id="approvals.E001",
            )
            for problem in found
        ]
    return errors


def check_named_approvers(app_configs=None, databases=None, **kwargs) -> list[checks.CheckMessage]:
    """A database check (`manage.py check --database default`, and `migrate`): an agent of
    the catalogue that names an approver or escalation user without an active account
    (approvals.W002). Gates still open; such a person is simply never asked. A warning, not an
    error: accounts may come after the deploy (SSO, an admin adding them). Silent on a fresh
    install (no account yet) and before the tables exist."""
    if not databases:
        return []
    wanted = {slug: named_users(agent.gates.as_dict()) for slug, agent in CATALOGUE.items()}
    try:
        users = get_user_model().objects
        if not users.exists():
            return []
        found = existing_users(set().union(*wanted.values()))
    except DatabaseError:
        return []
    return [
        checks.Warning(
            f"agent {slug!r} names approver {name!r}, who has no active account",
            hint="Create the account (or fix the name): until then nobody named can decide.",
            obj=slug,
            id="approvals.W002",
        )
        for slug, names in sorted(wanted.items())
        for name in sorted(names - found)
    ]
