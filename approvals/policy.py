"""Gate policy: decides, on the server only, whether a proposed tool call needs a person.

Inputs are the tool's registered risk metadata, the agent's declared rules (from the run's
config snapshot) and the validated arguments. Nothing the model writes can mark a call as
approved or lower its risk: fields such as "approved" or "risk" are not tool arguments
(extra arguments are refused by validation) and are never read here.
"""

import random
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from agentops.tools import Blast, Tool

BLAST_BY_LABEL = {b.label: b for b in Blast}


@dataclass(frozen=True)
class Verdict:
    gated: bool
    explanation: str
    risk: str
    sampled: bool = False


def _risk(tool: Tool) -> str:
    return tool.blast.label


def evaluate(
    *,
    tool: Tool,
    args: dict,
    rules: dict,
    confidence: float | None = None,
    rng: random.Random | None = None,
) -> Verdict:
    """The verdict for one validated call. `rules` is GateRules.as_dict() from the snapshot."""
    name = tool.name
    what = f"{'reversible' if tool.reversible else 'irreversible'}, blast radius {tool.blast.label}"
    risk = _risk(tool)

    if name in rules.get("never_gate", []):
        return Verdict(False, f"{what}: {name} is on this agent's never-gate list", risk)
    if name in rules.get("always_gate", []):
        return Verdict(True, f"{what}: {name} is on this agent's always-gate list", risk)

    reasons: list[str] = []
    if not tool.reversible and tool.blast >= Blast.MEDIUM:
        reasons.append(what)
    for arg, limit in rules.get("thresholds", {}).get(name, {}).items():
        value = _number(args.get(arg))
        if value is not None and value > Decimal(str(limit)):
            reasons.append(f"{arg} {value} exceeds {limit}")
    for arg, allowed in rules.get("allow_lists", {}).get(name, {}).items():
        if arg in args and str(args[arg]) not in allowed:
            reasons.append(f"{arg} {args[arg]!r} is not on the allow-list")
    threshold = rules.get("confidence_threshold")
    if threshold is not None and confidence is not None and confidence < threshold:
        reasons.append(f"the model's confidence {confidence:.2f} is below {threshold:.2f}")

    if reasons:
        if reasons[0] != what:
            reasons.insert(0, what)
        return Verdict(True, "; ".join(reasons), _raise_risk(risk, reasons))

    # Borderline: the policy lets it through, but it has side effects. Sample some anyway so
    # approvers keep seeing what "normal" looks like.
    rate = float(rules.get("sample_rate") or 0)
    if rate and tool.has_side_effects and (rng or random).random() < rate:
        return Verdict(True, f"{what}: sampled for review ({rate:.0%} of such calls)", risk, True)
    return Verdict(False, f"{what}: allowed by policy", risk)


def _raise_risk(risk: str, reasons: list[str]) -> str:
    # A rule beyond the base table (threshold, allow-list) makes the call at least medium.
    if len(reasons) > 1 and BLAST_BY_LABEL[risk] < Blast.MEDIUM:
        return Blast.MEDIUM.label
    return risk


def _number(value) -> Decimal | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None
