"""The plan screen (approve, edit or reject an agent's plan as a whole) and the run page's
to-do list of its plans (approvals/plans/models.py)."""

from django.contrib.auth.decorators import login_required
from django.core import signing
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from accounts.requests import SignedInRequest
from runs.models import Run, args_hash

from .. import decisions, views
from ..models import Approval
from . import forms as plan_form
from . import models as plans

PLAN_TEMPLATE = "approvals/plan.html"
TODO_TEMPLATE = "approvals/run_plan.html"
PLAN_DECISIONS = {"approve", "edit_approve", "reject"}


def _get_plan_approval(request: SignedInRequest, pk, decide: bool = False) -> Approval:
    approval = views._get_approval_for_user(request, pk, decide=decide)
    if approval.kind != Approval.Kind.PLAN:
        raise PermissionDenied  # not a plan: its own screen decides it
    return approval


def _context(request: HttpRequest, approval: Approval, **extra) -> dict:
    return {
        "approval": approval,
        "run": approval.run,
        "plan": getattr(approval, "plan", None),
        "rows": plan_form.rows(approval, extra.pop("post", None), extra.get("field_errors")),
        "problems": plans.problems(approval.run, approval.args.get("steps") or []),
        "shown_args_hash": args_hash(approval.tool, approval.args or {}),
        "can_decide": approval.status == Approval.Status.PENDING
        and Approval.objects.decidable_by(request.user).filter(pk=approval.pk).exists(),
        "opened_token": signing.dumps(timezone.now().isoformat(), salt=views.OPENED_SALT),
        "field_errors": {},
        "result": None,
        **extra,
    }


@require_GET
@login_required
def plan_screen(request: SignedInRequest, pk) -> HttpResponse:
    approval = views._get_approval_for_user(request, pk)
    if approval.kind != Approval.Kind.PLAN:
        return redirect("approvals:detail", pk=approval.pk)
    return render(request, PLAN_TEMPLATE, _context(request, approval))


@require_POST
@login_required
def decide_plan(request: SignedInRequest, pk) -> HttpResponse:
    """Approve the plan as proposed, approve it as edited on the screen, or reject it with a
    reason; the decision service records it and wakes the run."""
    approval = _get_plan_approval(request, pk, decide=True)
    decision = request.POST.get("decision", "")
    result: dict = {"decision": decision}
    errors: dict[str, list[str]] = {}
    arguments = None
    status = 200
    if decision not in PLAN_DECISIONS:
        status, result["message"] = 422, "Choose approve, edit and approve, or reject."
    elif decision == "edit_approve":
        arguments, errors = plan_form.edited(approval, request.POST)
        if errors:
            status, result["message"] = 422, "Some of the edits could not be read."
    if status == 200:
        try:
            approval = decisions.decide(
                approval.pk,
                user=request.user,
                decision="reject" if decision == "reject" else "approve",
                arguments=arguments,
                reason=request.POST.get("reason", "").strip(),
                opened_at=views.opened_at(request),
                shown_args_hash=request.POST.get("shown_args_hash") or None,
                via="web",
            )
        except decisions.DecisionConflict as exc:
            status, result["message"] = 409, str(exc)
        except decisions.DecisionForbidden as exc:
            status, result["message"] = 403, str(exc)
        except decisions.DecisionInvalid as exc:
            status, result["message"], errors = 422, str(exc), exc.errors
        else:
            result["ok"] = True
            result["message"] = _done(decision, approval)
    result["status"] = status
    approval = _get_plan_approval(request, pk)
    post = request.POST if status != 200 else None
    context = _context(request, approval, result=result, field_errors=errors, post=post)
    return render(request, PLAN_TEMPLATE, context, status=status)


def _done(decision: str, approval: Approval) -> str:
    if decision == "reject":
        return "Plan rejected. The agent is told your reason."
    edited = " with your edits" if approval.edited_args is not None else ""
    return f"Plan approved{edited}. Calls that follow it run without asking again."


@require_GET
@login_required
def run_plan(request: SignedInRequest, pk) -> HttpResponse:
    """The run's plans as live to-do lists (#run-plan): the run page fetches it when a step
    that moves a plan arrives over its socket (runs/rendering.py)."""
    if not request.user.can_view:
        raise PermissionDenied
    run = get_object_or_404(Run.objects.visible_to(request.user), pk=pk)
    return render(request, TODO_TEMPLATE, {"run": run, "todos": plans.todo(run)})
