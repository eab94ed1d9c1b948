"""The `submit_plan` tool: an agent proposes what it will do before doing it.

Agents that declare `plans=True` are offered it (agentkit/agents.py). A plan is a goal and
ordered steps, each a tool with either fixed arguments (`args`: the call must be exactly
this) or an argument envelope (`envelope`: conditions the call's arguments must meet; the
arguments it does not name are free). The approvals app gates the call as a plan approval
(approvals/plans/models.py): an operator approves, edits or rejects the plan as a whole, and inside
an approved plan the calls that follow it need no new gate. Calling the tool itself only
reports back the plan as approved: the decision is the approvals app's.
"""

from typing import Any, Literal

import pydantic

from agentkit.tools import Blast, tool

SUBMIT_PLAN = "submit_plan"
MAX_STEPS = 20


class Condition(pydantic.BaseModel):
    """One bound on an argument: `lte` a number (max amount), `eq` a value (fixed), `in` a
    list of allowed values."""

    model_config = pydantic.ConfigDict(extra="forbid")
    arg: str = pydantic.Field(min_length=1, max_length=64)
    op: Literal["lte", "eq", "in"]
    value: Any


class PlanStep(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    tool: str = pydantic.Field(min_length=1, max_length=64)
    args: dict[str, Any] | None = None
    envelope: list[Condition] | None = None
    note: str = pydantic.Field(default="", max_length=300)

    @pydantic.model_validator(mode="after")
    def _one_way_to_bound(self) -> "PlanStep":
        if self.args is not None and self.envelope is not None:
            raise ValueError("give either args (this exact call) or envelope (bounds), not both")
        for condition in self.envelope or []:
            if condition.op == "in" and not isinstance(condition.value, list):
                raise ValueError(f"{condition.arg}: 'in' takes a list of allowed values")
        return self


@tool(reversible=True, blast=Blast.NONE, name=SUBMIT_PLAN, inline=True)
def submit_plan(
    goal: str = pydantic.Field(min_length=1, max_length=1000),
    steps: list[PlanStep] = pydantic.Field(min_length=1, max_length=MAX_STEPS),
) -> dict[str, Any]:
    """Submit a plan before acting: the goal and the ordered tool calls you will make. Each
    step names a tool and either `args` (exactly this call) or `envelope` (a list of
    {"arg", "op": "lte" | "eq" | "in", "value"} bounds on its arguments). An operator approves,
    edits or rejects the plan; inside an approved plan, calls that follow it in order run
    without asking again, and any other call is checked by a person."""
    # Runs only once a person approved it, with the plan as approved (maybe edited).
    shown = [s.model_dump(mode="json", exclude_none=True) for s in steps]
    return {"status": "approved", "goal": goal, "steps": shown}
