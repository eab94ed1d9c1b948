"""Whether a call follows an approved plan: the rules, as pure functions.
Imports no model (tests/test_layering.py).
Why and how: docs/design/modules.md."""

from dataclasses import dataclass
from typing import Any

from ..gates import policy as declared_policy
from ..grants import rules as grants

OUTSIDE_ENVELOPE, OUT_OF_ORDER, MORE_CALLS, OTHER_TOOL = (
    "outside_envelope",
    "out_of_order",
    "more_calls",
    "other_tool",
)


@dataclass(frozen=True)
class Verdict:
    """A match (`deviation` empty, `step` the index it takes) or a deviation and why; `step`
    is then the planned step it concerns, if any."""

    step: int | None
    deviation: str = ""
    reason: str = ""

    @property
    def matched(self) -> bool:
        return not self.deviation


def check(steps: list[dict], next_step: int, tool: str, args: dict) -> Verdict:
    """How a call of `tool` with `args` stands to the plan whose next step is `next_step`."""
    if next_step < len(steps) and steps[next_step].get("tool") == tool:
        why = outside(steps[next_step], args)
        if not why:
            return Verdict(next_step)
        return Verdict(next_step, OUTSIDE_ENVELOPE, f"step {next_step + 1} ({tool}): {why}")
    later = [i for i in range(next_step + 1, len(steps)) if steps[i].get("tool") == tool]
    if later and next_step < len(steps):
        return Verdict(
            later[0],
            OUT_OF_ORDER,
            f"out of order: {tool} is step {later[0] + 1}, but step {next_step + 1} "
            f"({steps[next_step].get('tool')}) comes first",
        )
    taken = [i for i in range(min(next_step, len(steps))) if steps[i].get("tool") == tool]
    if taken:
        return Verdict(
            taken[-1],
            MORE_CALLS,
            f"more calls than planned: {tool} was planned {len(taken)} time(s), and step "
            f"{taken[-1] + 1} is already taken",
        )
    if next_step >= len(steps):
        return Verdict(
            None,
            MORE_CALLS,
            f"more calls than planned: all {len(steps)} planned steps are taken, and {tool} "
            "is not one of them",
        )
    return Verdict(
        None,
        OTHER_TOOL,
        f"another tool: {tool} is not in the plan; the next step is "
        f"{next_step + 1} ({steps[next_step].get('tool')})",
    )


def outside(step: dict, args: dict) -> str:
    """Why `args` are not what the step allows ("" when they are)."""
    if step.get("args") is not None:
        planned = step["args"]
        differs = [
            name
            for name in sorted(set(planned) | set(args))
            if not same(planned.get(name), args.get(name))
        ]
        return "; ".join(
            f"{name} is {_shown(args.get(name))}, the plan says {_shown(planned.get(name))}"
            for name in differs
        )
    return "; ".join(filter(None, (_breaks(c, args) for c in step.get("envelope") or [])))


def _breaks(condition: dict, args: dict) -> str:
    arg, op, bound = condition.get("arg"), condition.get("op"), condition.get("value")
    value = args.get(arg)
    if op == "in":
        allowed = bound if isinstance(bound, list) else []
        if any(same(value, v) for v in allowed):
            return ""
        return f"{arg} is {_shown(value)}, not one of {', '.join(map(_shown, allowed))}"
    if grants.matches([condition], args):
        return ""
    if op == "lte":
        return f"{arg} is {_shown(value)}, above the planned {_shown(bound)}"
    if op == "eq":
        return f"{arg} is {_shown(value)}, the plan says {_shown(bound)}"
    return f"{arg}: the plan's condition {op!r} cannot be checked"


def same(a: Any, b: Any) -> bool:
    """Equal as values: "40.00", 40 and 40.0 are one amount; "a" and "a" one word."""
    if a == b:
        return True
    if isinstance(a, dict | list) or isinstance(b, dict | list) or a is None or b is None:
        return False
    x, y = declared_policy._number(a), declared_policy._number(b)
    if x is not None and y is not None:
        return x == y
    return str(a) == str(b)


def _shown(value: Any) -> str:
    """A value as a reader takes it: words quoted, amounts ("40.00") as numbers."""
    if value is None:
        return "missing"
    if isinstance(value, str) and declared_policy._number(value) is None:
        return repr(value)
    return str(value)


def describe(step: dict) -> str:
    """A step's bounds in words: "order_id = 13, amount <= 50" or "exactly {…}"."""
    if step.get("args") is not None:
        return ", ".join(f"{k} = {_shown(v)}" for k, v in step["args"].items()) or "no arguments"
    words = []
    for c in step.get("envelope") or []:
        if c.get("op") == "in":
            allowed = c.get("value") if isinstance(c.get("value"), list) else []
            words.append(f"{c.get('arg')} one of {', '.join(map(_shown, allowed))}")
        else:
            words.append(f"{c.get('arg')} {'<=' if c.get('op') == 'lte' else '='} {c.get('value')}")
    return ", ".join(words) or "any arguments"
