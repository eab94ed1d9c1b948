"""Plans over the API (approvals/plans/models.py): a run's plans as to-do lists, one plan, and its
decision: approve as proposed, approve with edited steps (bounds changed, steps removed), or
reject with a reason. The decision goes through the decision service like any approval's
(who may decide, four-eyes, a second click's 409). Errors are JSON `{"detail": ...}` with 403,
404, 409 or 422, never a 500."""

from typing import Any, Literal
from uuid import UUID

from django.http import JsonResponse
from ninja import Field, Router, Schema

from accounts.requests import ApiRequest
from runs.models import Run, args_hash

from .. import decisions
from ..models import Approval, Plan
from . import gates as plan_gates
from . import models as plans

router = Router(tags=["plans"])


class ConditionIn(Schema):
    arg: str = Field(max_length=64)
    op: Literal["lte", "eq", "in"]
    value: Any


class StepIn(Schema):
    tool: str = Field(max_length=64)
    args: dict | None = None
    envelope: list[ConditionIn] | None = None
    note: str = Field("", max_length=300)


class PlanDecisionIn(Schema):
    """`approve` (with `steps` to approve an edit: the proposed steps, in their order, some
    removed or with other bound values) or `reject` (with a `reason`, which the agent is
    told). `shown_args_hash`: the plan's `arguments_hash` as shown; a decision on another is
    409."""

    decision: Literal["approve", "reject"]
    steps: list[StepIn] | None = None
    reason: str = Field("", max_length=5000)
    shown_args_hash: str | None = None


def _error(http_status: int, detail: str, **extra) -> JsonResponse:
    return JsonResponse({"detail": detail, **extra}, status=http_status)


def _plan_for(user, plan_id: int) -> Plan | None:
    visible = Approval.objects.visible_to(user).filter(kind=Approval.Kind.PLAN)
    return (
        Plan.objects.filter(pk=plan_id, approval__in=visible)
        .select_related("approval", "approval__decided_by", "run")
        .first()
    )


def _out(todo: plans.Todo) -> dict:
    plan, approval = todo.plan, todo.plan.approval
    return {
        "id": plan.pk,
        "run": str(plan.run_id),
        "approval": str(approval.pk),
        "state": todo.state,
        "goal": plan.goal,
        "arguments_hash": args_hash(approval.tool, approval.args or {}),
        "decided_by": approval.decided_by.get_username() if approval.decided_by else None,
        "decided_at": approval.decided_at.isoformat() if approval.decided_at else None,
        "edited": approval.edited_args is not None,
        "reason": approval.reason,
        "steps": [
            {
                "number": row.number,
                "tool": row.tool,
                "allowed": row.bounds,
                "planned": step,
                "needs_own_approval": plan_gates.not_covered_step(plan.run, step),
                "status": row.status,
                "detail": row.detail,
                "seq": row.seq,
            }
            for row, step in zip(todo.rows, plan.steps, strict=True)
        ],
        "deviations": [
            {k: d.get(k) for k in ("tool", "kind", "reason", "approval", "decision", "outcome")}
            for d in todo.deviations
        ],
    }


@router.get("/runs/{uuid:run_id}/plans")
def run_plans(request: ApiRequest, run_id: UUID):
    """The run's plans, newest first, each a to-do list: every step `pending`, `in progress`,
    `done`, `failed` or `skipped`, and the calls that deviated (`kind`: other_tool,
    outside_envelope, out_of_order, more_calls) with their decision and outcome."""
    run = Run.objects.visible_to(request.auth).filter(pk=run_id).first()
    if run is None:
        return _error(404, "no such run")
    return [_out(t) for t in plans.todo(run)]


@router.get("/plans/{int:plan_id}")
def get_plan(request: ApiRequest, plan_id: int):
    """One plan as a to-do list (see GET /api/runs/{id}/plans)."""
    plan = _plan_for(request.auth, plan_id)
    if plan is None:
        return _error(404, "no such plan")
    return next(_out(t) for t in plans.todo(plan.run) if t.plan.pk == plan.pk)


@router.post("/plans/{int:plan_id}/decision")
def decide_plan(request: ApiRequest, plan_id: int, payload: PlanDecisionIn):
    """Approve the plan (as proposed, or with `steps` edited), or reject it with a reason.
    Answers with the plan as it now stands."""
    plan = _plan_for(request.auth, plan_id)
    if plan is None:
        return _error(404, "no such plan")
    arguments = None
    if payload.steps is not None:
        if payload.decision != "approve":
            return _error(422, "only an approval takes edited steps", errors={"steps": ["reject"]})
        steps = [s.dict(exclude_none=True) for s in payload.steps]
        arguments = {"goal": plan.approval.args.get("goal", ""), "steps": steps}
    try:
        decisions.decide(
            plan.approval_id,
            user=request.auth,
            decision=payload.decision,
            arguments=arguments,
            reason=payload.reason,
            shown_args_hash=payload.shown_args_hash,
            via="api",
        )
    except decisions.DecisionConflict as exc:
        return _error(
            409, exc.message, approval_status=exc.approval_status, decided_by=exc.decided_by
        )
    except decisions.DecisionInvalid as exc:
        return _error(422, exc.message, errors=exc.errors)
    except decisions.DecisionForbidden as exc:
        return _error(403, exc.message)
    return get_plan(request, plan_id)
