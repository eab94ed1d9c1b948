"""What a standing grant may cover and whether a call is inside its envelope: pure rules,
asked when a grant is made (approvals/grants/models.py) and when the gate cascade uses one
(approvals/gates/cascade.py). Plans bound their steps with the same envelope
(approvals/plans/rules.py). Imports no model (tests/test_layering.py).
"""

from typing import Any

from agentkit.tools import Blast

from ..gates import policy as declared_policy
from ..gates.policy import rank

RISKS = tuple(b.label for b in Blast)  # Approval.Risk's values
# Risks that need a person each time, whatever was granted before.
NEVER_GRANTED_RISKS = frozenset({Blast.HIGH.label, Blast.CRITICAL.label})
OPS = ("lte", "eq")


def gate_refusal(gate: dict, rules: dict) -> str:
    """Why a grant may not let this gated call through ("" when it may): the same rules as
    `refusal`, asked again when a grant is used (the call at hand may be riskier)."""
    if gate.get("kind") != "action":
        return "a question"
    return refusal(
        risk=gate.get("risk", ""),
        sampled=bool(gate.get("sampled")),
        pii=bool(gate.get("findings")),
        rules=rules,
    )


def refusal(*, risk: str, sampled: bool, pii: bool, rules: dict) -> str:
    if risk in NEVER_GRANTED_RISKS or risk not in RISKS:
        return f"a {risk}-risk call needs a person's decision every time; it cannot be granted"
    four_eyes_from = rules.get("four_eyes_from") or ""
    if four_eyes_from and rank(risk) >= rank(four_eyes_from):
        return (
            f"the four-eyes rule applies to {risk}-risk calls of this agent (from "
            f"{four_eyes_from} up): each one needs its own second person, so it cannot be granted"
        )
    quorum_from = rules.get("quorum_from") or ""
    if quorum_from and rank(risk) >= rank(quorum_from):
        return (
            f"{risk}-risk calls of this agent need a quorum of approvers each time; "
            "it cannot be granted"
        )
    if pii:
        return "personal data leaving the system is checked by a person every time"
    if sampled:
        return "a call sampled for review: policy lets such calls run, nothing to grant"
    return ""


def envelope_problems(tool, envelope: Any) -> dict[str, list[str]]:
    """What is wrong with an envelope for `tool` (per argument); {} when it is sound."""
    if not isinstance(envelope, list):
        return {"envelope": ["a list of conditions"]}
    declared = properties(tool)
    problems: dict[str, list[str]] = {}
    for condition in envelope:
        if not isinstance(condition, dict) or set(condition) != {"arg", "op", "value"}:
            problems.setdefault("envelope", []).append(
                'each condition is {"arg": name, "op": "lte" or "eq", "value": ...}'
            )
            continue
        arg, op, value = condition["arg"], condition["op"], condition["value"]
        where = f"envelope.{arg}" if isinstance(arg, str) else "envelope"
        if tool is not None and arg not in declared:
            problems.setdefault(where, []).append(f"{tool.name} takes no argument {arg!r}")
        if op not in OPS:
            problems.setdefault(where, []).append("op must be lte or eq")
        elif op == "lte" and declared_policy._number(value) is None:
            problems.setdefault(where, []).append("an upper bound must be a number")
        elif op == "eq" and isinstance(value, dict | list):
            problems.setdefault(where, []).append("equality takes a single value")
    return problems


def matches(envelope: list[dict], args: dict) -> bool:
    """Whether the call's arguments are inside the envelope (every condition holds). A value
    that cannot be compared (missing, not a number) is outside: a bound is never bypassed by
    omission."""
    for condition in envelope:
        if condition.get("arg") not in args:
            # Missing is outside whatever the bound: `eq` compared a missing value as the text
            # "None", and null to null, so an envelope pinning "None" or null let it through.
            return False
        value = args.get(condition.get("arg"))
        if condition.get("op") == "lte":
            number = declared_policy._number(value)
            bound = declared_policy._number(condition.get("value"))
            if number is None or bound is None or number > bound:
                return False
        elif condition.get("op") == "eq":
            if value != condition.get("value") and str(value) != str(condition.get("value")):
                return False
        else:
            return False  # a condition we do not know cannot be met
    return True


def properties(tool) -> dict:
    return (tool.input_schema() if tool is not None else {}).get("properties") or {}
