"""Gate policy: decides, on the server only, whether a proposed tool call needs a person.
Pure rules: this module imports no model (tests/test_layering.py).
Why and how: docs/design/modules.md."""

import random
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from agentkit.tools import Blast, Tool

BLAST_BY_LABEL = {b.label: b for b in Blast}

RUN = "run"  # runs without a person
BORDERLINE = "borderline"  # runs, but may be sampled for review
GATE = "gate"  # a person decides first

# (reversible, blast radius) -> (outcome, why in plain words). Read it as the policy.
BASE_TABLE: dict[tuple[bool, Blast], tuple[str, str]] = {
    (True, Blast.NONE): (RUN, "no side effects"),
    (True, Blast.LOW): (BORDERLINE, "can be undone and reaches little"),
    (True, Blast.MEDIUM): (BORDERLINE, "can be undone"),
    # Decided: reversible + high runs. It can be undone, and gating every such call would
    # teach approvers to rubber-stamp; sampling keeps a person looking at some of them.
    (True, Blast.HIGH): (BORDERLINE, "can be undone"),
    # Decided: reversible + critical is gated. Even if it can be undone, a mistake at this
    # reach (everyone, production) does its harm before anyone undoes it.
    (True, Blast.CRITICAL): (GATE, "even undoable, a mistake this wide hurts before it is undone"),
    (False, Blast.NONE): (BORDERLINE, "cannot be undone, but reaches nothing"),
    # Decided: irreversible + low runs (sampled). The harm is small; the specific cases that
    # matter (recipients, amounts) are what thresholds and allow-lists are for.
    (False, Blast.LOW): (BORDERLINE, "cannot be undone, but reaches little"),
    (False, Blast.MEDIUM): (GATE, "cannot be undone"),
    (False, Blast.HIGH): (GATE, "cannot be undone"),
    (False, Blast.CRITICAL): (GATE, "cannot be undone"),
}

# A numeric argument within this share below its limit makes the call borderline.
BORDERLINE_MARGIN = Decimal("0.2")


@dataclass(frozen=True)
class Verdict:
    gated: bool
    explanation: str  # plain words, shown to the approver and in the timeline
    risk: str  # a Blast label, never below the tool's own
    sampled: bool = False  # gated by sampling, not by a rule
    reasons: tuple[str, ...] = field(default=())  # one entry per rule that gated
    borderline: bool = False
    # Gated by the base table alone (no threshold, allow-list, always-gate or confidence
    # reason): the only kind of gate an admin-accepted auto-approve rule may waive.
    by_table_only: bool = False


def rank(risk: str) -> int:
    """A risk label's order (an unknown one counts as medium)."""
    try:
        return int(Blast[risk.upper()])
    except KeyError:
        return int(Blast.MEDIUM)


def base_outcome(tool: Tool) -> tuple[str, str]:
    return BASE_TABLE[(tool.reversible, tool.blast)]


def describe(tool: Tool) -> str:
    return f"{'reversible' if tool.reversible else 'irreversible'}, blast radius {tool.blast.label}"


def evaluate(
    *,
    tool: Tool,
    args: dict,
    rules: dict,
    confidence: float | None = None,
    rng: random.Random | None = None,
) -> Verdict:
    """The verdict for one validated call. `rules` is GateRules.as_dict() from the snapshot;
    `rng` decides sampling (inject a seeded one for reproducible tests)."""
    name = tool.name
    what = describe(tool)
    outcome, why = base_outcome(tool)
    always = name in (rules.get("always_gate") or ())
    never = name in (rules.get("never_gate") or ()) and not always

    reasons: list[str] = []
    floor = Blast.NONE  # the least risk the reasons justify
    borderline: list[str] = []

    if always:
        reasons.append(f"{name} is on this agent's always-gate list")
    if not never:
        if outcome == GATE:
            reasons.append(why)
        elif outcome == BORDERLINE:
            borderline.append(why)

    for arg, limit in (rules.get("thresholds") or {}).get(name, {}).items():
        breach, near = _check_threshold(arg, args.get(arg), limit)
        if breach:
            reasons.append(breach)
            floor = max(floor, Blast.MEDIUM)
        elif near:
            borderline.append(near)

    for arg, allowed in (rules.get("allow_lists") or {}).get(name, {}).items():
        refused = _not_allowed(args.get(arg), allowed)
        if refused:
            listed = ", ".join(refused)
            reasons.append(
                f"{arg} {listed} {'is' if len(refused) == 1 else 'are'} not on the allow-list"
            )
            floor = max(floor, Blast.MEDIUM)

    threshold = rules.get("confidence_threshold")
    if (
        threshold is not None
        and confidence is not None
        and tool.has_side_effects
        and confidence < float(threshold)
    ):
        reasons.append(
            f"the model said its confidence is {confidence:.2f}, "
            f"below the agent's threshold of {float(threshold):.2f}"
        )
        floor = max(floor, Blast.LOW)

    risk = max(tool.blast, floor).label
    if reasons:
        return Verdict(
            True,
            f"{what}: " + "; ".join(reasons),
            risk,
            reasons=tuple(reasons),
            borderline=bool(borderline),
            by_table_only=reasons == [why] and outcome == GATE and not always and not never,
        )

    rate = sample_rate(rules, name)
    if borderline and not never and rate and (rng or random).random() < rate:
        return Verdict(
            True,
            f"{what}: sampled for review: policy would let it run ({'; '.join(borderline)}), "
            f"but {rate:.0%} of such borderline calls are shown to a person",
            risk,
            sampled=True,
            borderline=True,
        )
    if never:
        return Verdict(False, f"{what}: {name} is on this agent's never-gate list", risk)
    return Verdict(False, f"{what}: allowed by policy ({why})", risk, borderline=bool(borderline))


def _check_threshold(arg: str, value: Any, limit: Any) -> tuple[str, str]:
    """(breach reason, borderline note); both empty when the value is comfortably below."""
    limit_d = _number(limit)
    if limit_d is None:
        # A broken rule must not open a hole: treat it as unmet.
        return f"the limit for {arg} ({limit!r}) is not a number", ""
    number = _number(value)
    if number is None:
        shown = "is not given" if value is None else f"{_short(value)} is not a number"
        return f"{arg} {shown}, so the limit of {_fmt(limit_d)} cannot be checked", ""
    if number > limit_d:
        return f"{arg} {_fmt(number)} exceeds the limit of {_fmt(limit_d)}", ""
    if number > limit_d * (1 - BORDERLINE_MARGIN):
        return "", f"{arg} {_fmt(number)} is close to the limit of {_fmt(limit_d)}"
    return "", ""


def _not_allowed(value: Any, allowed: Iterable[str]) -> list[str]:
    """The values (as shown to the approver) that are not on the allow-list."""
    if value is None:
        return []
    entries = {str(a).strip().casefold() for a in allowed}
    domains = {e for e in entries if e.startswith("@")}
    values = value if isinstance(value, list | tuple) else [value]
    refused = []
    for v in values:
        text = str(v).strip().casefold()
        domain = "@" + text.rsplit("@", 1)[1] if "@" in text else None
        if text not in entries and domain not in domains:
            refused.append(_short(v))
    return refused


def sample_rate(rules: dict, tool_name: str) -> float:
    """The share of this tool's borderline calls that are sampled: its own rate in
    GateRules.sample_rates, else the agent's sample_rate."""
    per_tool = rules.get("sample_rates") or {}
    return _rate(per_tool[tool_name] if tool_name in per_tool else rules.get("sample_rate"))


def _rate(value: Any) -> float:
    try:
        rate = float(value or 0)
    except (TypeError, ValueError):
        return 0.0
    return min(max(rate, 0.0), 1.0)


def _number(value: Any) -> Decimal | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        return None
    return number if number.is_finite() else None


def _fmt(number: Decimal) -> str:
    # 820.00 -> "820", 820.50 -> "820.50": how a person would write it.
    return str(number.quantize(Decimal(1))) if number == number.to_integral() else str(number)


def _short(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


# --- the model's stated confidence -------------------------------------------------------------
# The model states it in its text, e.g. "Confidence: 0.4" or "confidence = 40%". A provider may
# also put a number in LLMResponse.extra["confidence"]. Either way it can only add a gate.
_CONFIDENCE = re.compile(r"\bconfidence\s*[:=]\s*(\d{1,3}(?:\.\d+)?)\s*(%?)", re.IGNORECASE)


def model_confidence(response: Any) -> float | None:
    """The lowest confidence the model stated in this turn, in [0, 1], or None."""
    if response is None:
        return None
    found: list[float] = []
    extra = getattr(response, "extra", None) or {}
    stated = _as_fraction(extra.get("confidence"), percent=False)
    if stated is not None:
        found.append(stated)
    for match in _CONFIDENCE.finditer(getattr(response, "text", "") or ""):
        value = _as_fraction(match.group(1), percent=bool(match.group(2)))
        if value is not None:
            found.append(value)
    # Several statements: the least sure one counts (the signal can only add gates).
    return min(found) if found else None


def _as_fraction(value: Any, *, percent: bool) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if percent or 1 < number <= 100:
        number /= 100
    return number if 0 <= number <= 1 else None
