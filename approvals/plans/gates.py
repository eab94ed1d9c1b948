"""The gate's side of plans (approvals/plans/models.py): what to ask about a `submit_plan` call or a
call inside an approved plan, and opening it.

The gate cascade (approvals/gates/cascade.py) asks `plan_gate` / `in_plan` before the
engine's transaction (no writes), and hands the gate to `open_plan` / `open_in_plan` inside it.
Matching happens when the gate opens, with the plan's row locked: the calls of one model turn
are opened one after the other, so the second is matched against the step after the first's.
"""

import re

from django.utils import timezone

from agentkit.plan_tool import SUBMIT_PLAN
from agentkit.tools import Blast, Tool, get_tool
from runs.engine.pii_guard import FINAL_ANSWER
from runs.models import Run

from .. import permissions
from ..gates import record
from ..grants import rules as grants
from ..models import Approval, Plan
from . import models as plans
from . import rules as plan_matching

# Not calls a plan speaks of: questions, a new plan, and the final answer the PII guard holds.
NOT_PLANNED = ("ask_operator", SUBMIT_PLAN, FINAL_ANSWER)


def plan_gate(item: dict, response) -> dict:
    """A `submit_plan` call always goes to a person: the plan approval."""
    steps = item["args"].get("steps") or []
    return {
        "kind": Approval.Kind.PLAN,
        "tool": SUBMIT_PLAN,
        "explanation": (
            f"the agent submitted a plan of {len(steps)} step(s) for approval: "
            "approve, edit or reject it as a whole"
        ),
        "risk": Approval.Risk.MEDIUM,
        "context": (getattr(response, "text", "") or "")[:4000],
    }


def in_plan(run: Run, item: dict, tool: Tool, gate: dict | None) -> dict | None:
    """Inside an approved plan every call is checked against it when its gate opens: the gate
    to open instead of `gate` (the policy's, or None). Questions and new plans stay as they
    are; without an approved plan, so does everything."""
    if tool.name in NOT_PLANNED:
        return gate
    if gate is not None and gate.get("kind") != Approval.Kind.ACTION:
        return gate
    plan = plans.active(run)
    if plan is None:
        return gate
    return {
        "kind": Approval.Kind.ACTION,
        "tool": tool.name,
        "plan": plan.pk,
        "policy_gate": gate,
        "explanation": (gate or {}).get("explanation", ""),
        "risk": (gate or {}).get("risk") or max(tool.blast, Blast.LOW).label,
        "context": (gate or {}).get("context", ""),
    }


def open_plan(run: Run, item: dict, gate: dict) -> str:
    """The plan's approval and its Plan row; the approval's id."""
    steps = item["args"].get("steps") or []
    found = plans.problems(run, steps)
    explanation = gate["explanation"]
    if found:
        explanation += ". Problems: " + "; ".join(found)
    approval = record.ask_person(
        run,
        item,
        kind=Approval.Kind.PLAN,
        tool=SUBMIT_PLAN,
        explanation=explanation[:1000],
        risk=gate["risk"],
        context=gate.get("context", ""),
        step_extra={"plan_submitted": True, "goal": item["args"].get("goal", "")},
    )
    Plan.objects.create(
        run=run, approval=approval, goal=item["args"].get("goal", ""), created_at=timezone.now()
    )
    return str(approval.pk)


def open_in_plan(run: Run, item: dict, gate: dict) -> str:
    """Match the call against the plan and record it: a match is approved by the plan (no
    person asked), unless a person must decide such a call every time; a deviation opens an
    approval that says which. The approval's id."""
    plan = Plan.objects.select_for_update().select_related("approval").get(pk=gate["plan"])
    steps = plan.steps
    progress = (list(plan.progress) + [{}] * len(steps))[: len(steps)]
    verdict = plan_matching.check(steps, plan.next_step, item["name"], item["args"])
    policy = gate.get("policy_gate")
    asked = _asked(gate)
    if verdict.matched:
        number = verdict.step + 1
        item["plan_step"] = f"{plan.pk}:{number}"
        progress[verdict.step] = {"tool_use_id": item["id"], "seq": run.last_seq + 1}
        plan.next_step = number
        refusal = not_covered(policy, permissions.gate_rules(run)) if policy else ""
        where = f"step {number} of plan #{plan.pk}"
        if refusal:
            approval = record.ask_person(
                run,
                item,
                **{
                    **asked,
                    "explanation": (
                        f"{where} ({item['name']}), but {refusal}: the plan does not cover it; "
                        f"without the plan: {policy['explanation']}"
                    )[:1000],
                },
                step_extra={"plan": plan.pk, "plan_step": number, "plan_covers": False},
            )
            progress[verdict.step]["approval"] = str(approval.pk)
        else:
            approval = _approved_by_plan(run, item, plan, number, gate)
        plan.progress = progress
        plan.save(update_fields=["progress", "next_step"])
        return str(approval.pk)
    why = f"deviates from plan #{plan.pk}: {verdict.reason}"
    if policy:
        why += f"; and {policy['explanation']}"
    approval = record.ask_person(
        run,
        item,
        **{**asked, "explanation": why[:1000]},
        step_extra={"plan": plan.pk, "deviation": verdict.deviation, "deviates": verdict.reason},
    )
    plan.deviations = [
        *plan.deviations,
        {
            "tool": item["name"],
            "kind": verdict.deviation,
            "reason": verdict.reason,
            "approval": str(approval.pk),
            "tool_use_id": item["id"],
            "seq": approval.gate_seq,
        },
    ]
    plan.progress = progress
    plan.save(update_fields=["deviations", "progress"])
    return str(approval.pk)


def not_covered(gate: dict, rules: dict) -> str:
    """Why a plan does not cover this gated call ("" when it does): what a standing grant
    could not cover either (approvals/grants/models.py), in a plan's words."""
    return re.sub(r"[;,] (so )?it cannot be granted", "", grants.gate_refusal(gate, rules))


def _asked(gate: dict) -> dict:
    """What `_open` takes of the policy's gate (or of the plan's, when policy let it run):
    a learned rule's marks are left out: whatever leaves the plan goes to a person."""
    policy = gate.get("policy_gate") or {}
    asked = {
        "kind": Approval.Kind.ACTION,
        "tool": gate["tool"],
        "explanation": gate["explanation"],
        "risk": policy.get("risk") or gate["risk"],
        "context": policy.get("context") or gate.get("context", ""),
    }
    if policy.get("sampled"):
        asked["sampled"] = True
    if policy.get("findings"):
        asked["findings"] = policy["findings"]
    return asked


def _approved_by_plan(run: Run, item: dict, plan: Plan, number: int, gate: dict) -> Approval:
    """The call the plan covers, approved by it (its approver is the plan's): "allowed by plan
    #n step k"."""
    policy = gate.get("policy_gate")
    by = plan.approval.decided_by.get_username() if plan.approval.decided_by else "an approver"
    why = f"allowed by plan #{plan.pk} step {number} (approved by {by})"
    return record.approved_without_person(
        run,
        item,
        tool=gate["tool"],
        risk=gate["risk"],
        explanation=(f"{why}; without it: {policy['explanation']}" if policy else why)[:1000],
        reason=why,
        step={"plan": plan.pk, "plan_step": number, "allowed_by_plan": why},
    )


def not_covered_step(run: Run, step: dict) -> str:
    """Why a call of this step will still need its own approval inside the plan ("" when the
    plan covers it): its tool's base risk, and the agent's four-eyes and quorum rules."""
    tool = get_tool(step.get("tool") or "")
    if tool is None:
        return ""
    # The tool's own risk; a call's arguments can only raise it (thresholds), and the gate
    # asks again with the call's own risk when it comes (plans/gates.py).
    return not_covered(
        {"kind": Approval.Kind.ACTION, "risk": tool.blast.label}, permissions.gate_rules(run)
    )
