"""The plan screen's form: the proposed steps as rows an approver can edit (envelope values,
removed steps), and the edited plan read back from a POST.

Values keep the proposal's types: a bound proposed as a number stays a number when it is
edited, an allowed-values list is typed comma-separated. What the edit may change at all is
plans/edits.py's, checked again by the decision service.
"""

import copy
from dataclasses import dataclass, field
from typing import Any

from agentkit.tools import get_tool

from ..gates import policy as declared_policy
from ..models import Approval
from . import gates as plan_gates
from . import rules as plan_matching

MAX_VALUE_CHARS = 200


@dataclass
class Bound:
    name: str  # the form field
    arg: str
    op: str
    text: str  # the value as the input shows it
    errors: list[str] = field(default_factory=list)


@dataclass
class StepRow:
    number: int
    tool: str
    fixed: str  # fixed arguments in words ("" for an envelope step)
    note: str
    bounds: list[Bound] = field(default_factory=list)
    not_covered: str = ""  # why a call of this step still needs its own approval
    known: bool = True


def rows(approval: Approval, post=None, errors: dict | None = None) -> list[StepRow]:
    """The plan's steps as the screen shows them: as approved once decided (an edit
    included), else as proposed, whose rows the form's field names point into; with what was
    typed (`post`) and its errors after a refused edit."""
    shown = rows_of(approval.final_args, approval.run)
    for row in shown:
        for bound in row.bounds:
            if post is not None and bound.name in post:
                bound.text = post[bound.name]
            bound.errors = (errors or {}).get(bound.name, [])
    return shown


def rows_of(plan: dict, run) -> list[StepRow]:
    shown = []
    for index, step in enumerate(plan.get("steps") or []):
        row = StepRow(
            number=index + 1,
            tool=str(step.get("tool", "")),
            fixed=plan_matching.describe(step) if step.get("args") is not None else "",
            note=str(step.get("note") or ""),
            not_covered=plan_gates.not_covered_step(run, step),
            known=get_tool(str(step.get("tool", ""))) is not None,
        )
        for j, c in enumerate(step.get("envelope") or []):
            row.bounds.append(Bound(f"value_{index}_{j}", c.get("arg"), c.get("op"), _text(c)))
        shown.append(row)
    return shown


def _text(condition: dict) -> str:
    value = condition.get("value")
    if condition.get("op") == "in" and isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return "" if value is None else str(value)


def edited(approval: Approval, post) -> tuple[dict | None, dict[str, list[str]]]:
    """The plan as the form edits it (None and errors when a value cannot be read)."""
    plan = copy.deepcopy(approval.args)
    errors: dict[str, list[str]] = {}
    kept = []
    for index, step in enumerate(plan.get("steps") or []):
        if post.get(f"remove_{index}"):
            continue
        for j, condition in enumerate(step.get("envelope") or []):
            name = f"value_{index}_{j}"
            if name not in post:
                continue
            value, error = _read(condition, post.get(name, ""))
            if error:
                errors[name] = [error]
            else:
                condition["value"] = value
        kept.append(step)
    if not kept:
        errors["steps"] = ["keep at least one step, or reject the plan"]
    plan["steps"] = kept
    return (None, errors) if errors else (plan, {})


def _read(condition: dict, text: str) -> tuple[Any, str]:
    text = text.strip()
    if len(text) > MAX_VALUE_CHARS:
        return None, f"at most {MAX_VALUE_CHARS} characters"
    was = condition.get("value")
    if condition.get("op") == "in":
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            return None, "at least one allowed value"
        sample = was[0] if isinstance(was, list) and was else ""
        return [_like(sample, t) for t in items], ""
    if condition.get("op") == "lte":
        number = declared_policy._number(text)
        if number is None:
            return None, "a number"
        return (_like(was, text), "") if not isinstance(was, str) else (text, "")
    if not text:
        return None, "a value"
    return _like(was, text), ""


def _like(sample: Any, text: str) -> Any:
    """`text` as the type of the proposed value (an int stays an int, when it reads as one)."""
    if isinstance(sample, bool):
        return text.lower() in ("true", "1", "yes")
    if isinstance(sample, int):
        try:
            return int(text)
        except ValueError:
            return text
    if isinstance(sample, float):
        try:
            return float(text)
        except ValueError:
            return text
    return text
