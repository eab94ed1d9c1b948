"""Approval pages: the live queue, the decision screen, approver statistics (admins).

Decisions go through `approvals.decisions.decide` (row lock, four-eyes, quorum): this module
only turns the form into its arguments and its outcome into a clear message and status.
"""

from datetime import datetime, timedelta

from django.contrib.auth.decorators import login_required
from django.core import signing
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from runs import rendering
from runs.models import Step

from . import arg_form, decisions, listing
from . import stats as approval_stats
from .models import Approval, ApprovalVote

QUEUE_TEMPLATE = "approvals/queue.html"
DETAIL_TEMPLATE = "approvals/detail.html"
OPENED_SALT = "approvals.opened_at"
DECISIONS = {"approve", "edit_approve", "reject", "answer"}
NON_ARG_ERRORS = {"reason", "answer", "decision", "arguments"}


def _get_approval_for_user(request: HttpRequest, pk, decide: bool = False) -> Approval:
    """The one place that says who may see (and, with decide=True, decide) an approval.
    Finer rules (four-eyes, named approvers, quorum) belong to the decision service."""
    user = request.user
    if not user.can_view or (decide and not user.can_approve):
        raise PermissionDenied
    return get_object_or_404(
        Approval.objects.visible_to(user).select_related("run", "run__launched_by", "decided_by"),
        pk=pk,
    )


def assigned_to(user, rows: list[Approval]) -> list[Approval]:
    """The queue's "assigned to me": what this user may decide and has not voted on yet.
    The decision service's own rule, in two queries for the whole list."""
    voted = set(
        ApprovalVote.objects.filter(user=user, approval__in=rows).values_list(
            "approval_id", flat=True
        )
    )
    return [
        a
        for a in rows
        if a.pk not in voted
        and not a.run.is_terminal
        and not decisions.forbidden_reason(a, a.run, user, "approve")
    ]


# --- the queue ---------------------------------------------------------------------------------
@require_GET
@login_required
def queue(request: HttpRequest) -> HttpResponse:
    if not request.user.can_view:
        raise PermissionDenied
    agent = request.GET.get("agent", "")
    risk = request.GET.get("risk", "")
    mine = request.GET.get("mine") == "1"
    approvals = Approval.objects.pending()
    if agent:
        approvals = approvals.filter(run__agent=agent)
    if risk in Approval.Risk.values:
        approvals = approvals.filter(risk=risk)
    rows = listing.queue(approvals)
    if mine:
        rows = assigned_to(request.user, rows)
    agents = sorted(set(Approval.objects.pending().values_list("run__agent", flat=True)))
    context = {
        "rows": rows,
        "agents": agents,
        "risks": Approval.Risk.values,
        "filters": {"agent": agent, "risk": risk, "mine": mine},
        # The pushed queue replaces the table only when no filter could exclude rows.
        "live_insert": not (agent or risk or mine),
        "recent": Approval.objects.exclude(status=Approval.Status.PENDING)
        .select_related("run", "decided_by")
        .order_by("-decided_at")[:10],
    }
    return render(request, QUEUE_TEMPLATE, context)


# --- the decision screen -----------------------------------------------------------------------
def _detail_context(request: HttpRequest, approval: Approval, **extra) -> dict:
    run = approval.run
    recent = list(run.steps.filter(seq__lte=approval.gate_seq).order_by("-seq")[:8])[::-1]
    launched = run.steps.filter(seq=1, kind=Step.Kind.STATUS).values_list("data", flat=True)
    prompt = (launched[0] or {}).get("prompt", "") if launched else ""
    original = approval.args or {}
    fields = arg_form.fields_for(approval.tool, original) if approval.kind == "action" else []
    submitted = extra.pop("submitted", None)
    if submitted is not None:
        for f in fields:
            if f.kind == "checkbox":
                f.current = "true" if submitted.get(f.html_name) else "false"
            else:
                f.current = submitted.get(f.html_name, f.text)
    else:
        for f in fields:
            f.current = f.text
    for f in fields:
        f.errors = extra.get("field_errors", {}).get(f.html_name, [])
    return {
        "approval": approval,
        "run": run,
        "gauges": rendering.gauges(run),
        "prompt": prompt,
        "input_text": rendering.pretty(run.input),
        "args_text": rendering.pretty(original),
        "fields": fields,
        "steps": [rendering.step_view(s) for s in recent],
        "can_decide": request.user.can_approve and approval.status == Approval.Status.PENDING,
        "opened_token": signing.dumps(timezone.now().isoformat(), salt=OPENED_SALT),
        "field_errors": {},
        "result": None,
        **extra,
    }


@require_GET
@login_required
def detail(request: HttpRequest, pk) -> HttpResponse:
    # Opening the screen writes nothing (GET is safe): the time it was opened travels, signed,
    # with the decision and is recorded then.
    approval = _get_approval_for_user(request, pk)
    return render(request, DETAIL_TEMPLATE, _detail_context(request, approval))


@require_POST
@login_required
def opened(request: HttpRequest, pk) -> HttpResponse:
    """The decision screen reports that a decider opened it (htmx, on load): time to decide
    is measured from here. A POST, because it writes; the page's GET stays read-only."""
    approval = _get_approval_for_user(request, pk, decide=True)
    decisions.record_open(approval, request.user)
    return HttpResponse(status=204)


def _opened_at(request: HttpRequest) -> datetime | None:
    try:
        raw = signing.loads(request.POST.get("opened", ""), salt=OPENED_SALT, max_age=7 * 86400)
        return datetime.fromisoformat(raw)
    except (signing.BadSignature, ValueError, TypeError):
        return None


@require_POST
@login_required
def decide(request: HttpRequest, pk) -> HttpResponse:
    approval = _get_approval_for_user(request, pk, decide=True)
    decision = request.POST.get("decision", "")
    result: dict = {"decision": decision}
    status = 200
    field_errors: dict[str, list[str]] = {}
    arguments = None
    if decision not in DECISIONS:
        status, result["message"] = 422, "Choose approve, edit and approve, reject or answer."
    elif decision == "edit_approve":
        fields = arg_form.fields_for(approval.tool, approval.args or {})
        arguments, field_errors = arg_form.parse(fields, approval.args or {}, request.POST)
        if field_errors:
            status, result["message"] = 422, "Some arguments could not be read."
    if status == 200:
        try:
            outcome = decisions.decide(
                approval.pk,
                user=request.user,
                # Edit-and-approve is an approval with arguments (unchanged ones are a no-op).
                decision="approve" if decision == "edit_approve" else decision,
                arguments=arguments,
                reason=request.POST.get("reason", "").strip(),
                answer=request.POST.get("answer", "").strip(),
                opened_at=_opened_at(request),
            )
        except decisions.DecisionConflict as exc:
            status, result["message"] = 409, str(exc)
        except decisions.DecisionForbidden as exc:
            status, result["message"] = 403, str(exc)
        except decisions.DecisionInvalid as exc:
            status, result["message"] = 422, str(exc)
            field_errors = {
                (k if k in NON_ARG_ERRORS else f"arg_{k}"): v for k, v in exc.errors.items()
            }
        else:
            result["ok"] = True
            result["message"] = _success_message(decision, outcome)
    result["status"] = status
    approval.refresh_from_db()
    if request.htmx:
        context = {"approval": approval, "result": result, "field_errors": field_errors}
        return render(request, DETAIL_TEMPLATE + "#decision-result", context, status=status)
    context = _detail_context(
        request, approval, result=result, field_errors=field_errors, submitted=request.POST
    )
    return render(request, DETAIL_TEMPLATE, context, status=status)


def _success_message(decision: str, approval: Approval) -> str:
    if approval.status == Approval.Status.PENDING:
        # A quorum gate: this vote is recorded, others are still needed.
        return "Your approval is recorded; more approvers are needed before the call runs."
    words = {
        "approve": "Approved",
        "edit_approve": "Approved with your edits" if approval.edited_args else "Approved",
        "reject": "Rejected",
        "answer": "Answered",
    }[decision]
    return f"{words}. The run continues once every decision it waits on is made."


# --- approver statistics -----------------------------------------------------------------------
@require_GET
@login_required
def stats(request: HttpRequest) -> HttpResponse:
    if not request.user.is_admin:
        raise PermissionDenied
    try:
        days = min(max(int(request.GET.get("days", 30)), 1), 365)
    except ValueError:
        days = 30
    figures = approval_stats.approver_stats(since=timezone.now() - timedelta(days=days))
    return render(request, "approvals/stats.html", {"stats": figures, "days": days})
