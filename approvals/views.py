"""Approval pages: the live queue, the decision screen, approver statistics (admins).

Decisions go through `approvals.decisions.decide` (row lock, four-eyes, quorum): this module
only turns the form into its arguments and its outcome into a clear message and status.
"""

from datetime import datetime
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.core import signing
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from accounts.requests import SignedInRequest
from agentkit import previews
from runs import events, rendering
from runs.models import Step, args_hash

from . import arg_form, decisions, listing, permissions, presence, stream_messages
from .evidence import card as evidence
from .grants import forms as grant_forms
from .models import Approval, ApprovalVote

QUEUE_TEMPLATE = "approvals/queue.html"
DETAIL_TEMPLATE = "approvals/detail.html"
OPENED_SALT = "approvals.opened_at"
DECISIONS = {"approve", "edit_approve", "reject", "answer"}
NON_ARG_ERRORS = {"reason", "answer", "decision", "arguments"}


def _get_approval_for_user(request: SignedInRequest, pk, decide: bool = False) -> Approval:
    """The one place that says who may see (and, with decide=True, decide) an approval.
    Finer rules (four-eyes, named approvers, quorum) belong to the decision service."""
    user = request.user
    if not user.can_view or (decide and not user.can_approve):
        raise PermissionDenied
    approval = get_object_or_404(
        Approval.objects.visible_to(user).select_related("run", "run__launched_by", "decided_by"),
        pk=pk,
    )
    # Seen but not decided: the teams that own its agent let this user view only.
    if decide and not Approval.objects.decidable_by(user).filter(pk=approval.pk).exists():
        raise PermissionDenied
    return approval


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
        if a.pk not in voted and not a.run.is_terminal and permissions.may_approve(a, a.run, user)
    ]


# --- the queue ---------------------------------------------------------------------------------
@require_GET
@login_required
def queue(request: SignedInRequest) -> HttpResponse:
    if not request.user.can_view:
        raise PermissionDenied
    agent = request.GET.get("agent", "")
    risk = request.GET.get("risk", "")
    mine = request.GET.get("mine") == "1"
    visible = Approval.objects.visible_to(request.user)
    approvals = visible.pending()
    if agent:
        approvals = approvals.filter(run__agent=agent)
    if risk in Approval.Risk.values:
        approvals = approvals.filter(risk=risk)
    # A page at a time: a thousand pending rows are 400 KB of HTML nobody reads at once.
    page = listing.queue_page(
        approvals, after=request.GET.get("after"), before=request.GET.get("before")
    )
    rows = list(page.rows)
    if mine:
        rows = assigned_to(request.user, rows)
    presence.mark_claims(rows)
    agents = sorted(set(visible.pending().values_list("run__agent", flat=True)))
    context = {
        "rows": rows,
        "agents": agents,
        "risks": Approval.Risk.values,
        "filters": {"agent": agent, "risk": risk, "mine": mine},
        "page": page,
        "pending_count": approvals.count(),
        "query": urlencode(
            {k: v for k, v in (("agent", agent), ("risk", risk)) if v}
            | ({"mine": "1"} if mine else {})
        ),
        # The pushed queue (its first page) replaces the table only when no filter could
        # exclude rows and this is the first page.
        "live_insert": not (agent or risk or mine) and page.is_first,
        "recent": visible.exclude(status=Approval.Status.PENDING)
        .filter(decided_at__isnull=False)  # what approval_decided_idx holds
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
    fields = (
        arg_form.fields_for(approval.tool_object(), original) if approval.kind == "action" else []
    )
    submitted = extra.pop("submitted", None)
    result = extra.get("result")
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
        "input_text": rendering.pretty(run.masked(run.input)),  # masked under a PII policy
        "args_text": arg_form.call_text(approval.tool_object(), original)
        if approval.kind == Approval.Kind.ACTION
        else rendering.pretty(original),
        "fields": fields,
        "shown_args_hash": args_hash(approval.tool, original),
        "has_fields": bool(fields),
        "diff": _edit_preview(approval, submitted or {}) if fields else None,
        "steps": [rendering.step_view(s) for s in recent],
        "evidence": evidence.for_approval(approval),
        "findings": evidence.pii_findings(approval),
        "effect": approval.effect() if approval.kind == Approval.Kind.ACTION else "",
        "preview": previews.view(approval.preview),
        "can_decide": approval.status == Approval.Status.PENDING
        and Approval.objects.decidable_by(request.user).filter(pk=approval.pk).exists(),
        "decided": _decided(result),
        "opened_token": signing.dumps(timezone.now().isoformat(), salt=OPENED_SALT),
        "field_errors": {},
        "result": None,
        **stream_messages.presence_context(approval, request.user),
        **grant_forms.card_context(approval, request.user),
        "halted": approval.status == Approval.Status.EXPIRED
        and approval.on_expiry == "halt"
        and decisions.is_halted(run),
        "may_resume": decisions.may_resume_halted(request.user),
        **extra,
    }


def _decided(result: dict | None) -> bool:
    """Whether the screen's buttons are done: after a decision, and after any answer but
    "fix your input" (422) or "confirm this effect", pressing again could only be a mistake
    or a conflict."""
    return (
        result is not None
        and result.get("status") != 422
        and not result.get("confirm")
        and not result.get("preview_changed")
    )


def _edit_preview(approval: Approval, post) -> dict:
    """What an edit-and-approve of the posted fields would execute, shown before it is pressed:
    the fields are parsed and validated by the code the decision itself uses, so the diff on
    screen is the server's reading of the edit, not the browser's."""
    original = approval.args or {}
    fields = arg_form.fields_for(approval.tool_object(), original)
    edited_names = arg_form.changed(fields, post)
    preview: dict = {"edited": bool(edited_names), "changes": [], "errors": {}, "message": ""}
    if not edited_names:
        return preview
    arguments, errors = arg_form.parse(fields, original, post)
    if errors:
        preview["errors"] = {k.removeprefix("arg_"): v for k, v in errors.items()}
        preview["message"] = "Some arguments could not be read."
        return preview
    try:
        rules = permissions.gate_rules(approval.run)
        needed = permissions.votes_needed(approval, rules)
        final = decisions.validated_edit(approval, arguments, rules, votes_needed=needed)
    except decisions.DecisionInvalid as exc:
        preview["errors"] = exc.errors
        preview["message"] = exc.message
        return preview
    preview["changes"] = arg_form.changes(fields, original, final)
    # What the edit would do, in the tool's words: the edit's confirmation, before it is pressed.
    preview["effect"] = approval.effect(final) if preview["changes"] else ""
    return preview


@require_GET
@login_required
def detail(request: SignedInRequest, pk) -> HttpResponse:
    # Opening the screen writes nothing (GET is safe): the time it was opened travels, signed,
    # with the decision and is recorded then.
    approval = _get_approval_for_user(request, pk)
    if approval.kind == Approval.Kind.PLAN:
        # A plan is decided as a whole on its own screen (approvals/plans/views.py).
        return redirect("approvals:plan", pk=approval.pk)
    return render(request, DETAIL_TEMPLATE, _detail_context(request, approval))


@require_POST
@login_required
def opened(request: SignedInRequest, pk) -> HttpResponse:
    """The decision screen reports that a decider opened it (static/js/app.js, on load): time
    to decide is measured from here. A POST, because it writes; the page's GET stays read-only."""
    approval = _get_approval_for_user(request, pk, decide=True)
    decisions.record_open(approval, request.user)
    return HttpResponse(status=204)


def opened_at(request: HttpRequest) -> datetime | None:
    try:
        raw = signing.loads(request.POST.get("opened", ""), salt=OPENED_SALT, max_age=7 * 86400)
        return datetime.fromisoformat(raw)
    except (signing.BadSignature, ValueError, TypeError):
        return None


@require_POST
@login_required
def edit_preview(request: SignedInRequest, pk) -> HttpResponse:
    """The diff of the edited fields against the proposed call (htmx, as the approver types).
    A POST so argument values stay out of URLs and logs; it writes nothing."""
    approval = _get_approval_for_user(request, pk, decide=True)
    if approval.kind != Approval.Kind.ACTION:
        return HttpResponse("Only an action's arguments can be edited.", status=422)
    context = {"approval": approval, "diff": _edit_preview(approval, request.POST)}
    return render(request, DETAIL_TEMPLATE + "#arg-diff", context)


def _refusal(approval: Approval, decision: str, post) -> tuple[str, dict[str, list[str]]]:
    """Why the form's approve must not go through (and per-field errors), or ("", {})."""
    if approval.kind != Approval.Kind.ACTION or decision not in ("approve", "edit_approve"):
        return "", {}
    if not post.get("shown_args_hash"):
        return "The decision does not say which call you were shown; reload the approval.", {}
    if decision == "approve":
        edited = arg_form.changed(
            arg_form.fields_for(approval.tool_object(), approval.args or {}), post
        )
        if edited:
            # Approve means the call as proposed; a changed field says the approver wanted
            # something else. Neither call is approved: they must say which one they mean.
            return (
                f"Not approved: you changed {', '.join(edited)} but pressed Approve, which "
                "approves the call as proposed. Nothing was executed. Press Edit and approve "
                "to approve your edit, or undo your changes to approve the proposed call.",
                {f"arg_{name}": ["changed: use Edit and approve"] for name in edited},
            )
    return "", {}


@require_POST
@login_required
def decide(request: SignedInRequest, pk) -> HttpResponse:
    approval = _get_approval_for_user(request, pk, decide=True)
    decision = request.POST.get("decision", "")
    result: dict = {"decision": decision}
    status = 200
    field_errors: dict[str, list[str]] = {}
    arguments = None
    if decision not in DECISIONS:
        status, result["message"] = 422, "Choose approve, edit and approve, reject or answer."
    else:
        refusal, field_errors = _refusal(approval, decision, request.POST)
        if refusal:
            status, result["message"] = 422, refusal
    if (
        status == 200
        and decision == "approve"
        and approval.status == Approval.Status.PENDING
        and not permissions.forbidden_reason(approval, approval.run, request.user, "approve")
    ):
        # Before a confirmation too: the approver hears at once that the data moved.
        fresh = decisions.changed_preview(approval, request.POST.get("shown_preview_hash"))
        if fresh is not None:
            decisions.store_preview(approval.pk, fresh)
            status, result["message"] = 409, decisions.PreviewChanged.DETAIL
            result["preview_changed"] = True
    if status == 200 and _needs_confirmation(request, approval, decision):
        # Nothing is decided yet: the approver is shown the exact effect and confirms it. The
        # confirmation names the call they were shown (its hash), so it cannot be replayed
        # onto another one.
        result["confirm"] = approval.effect()
    elif status == 200 and decision == "edit_approve":
        fields = arg_form.fields_for(approval.tool_object(), approval.args or {})
        arguments, field_errors = arg_form.parse(fields, approval.args or {}, request.POST)
        if field_errors:
            status, result["message"] = 422, "Some arguments could not be read."
    if status == 200 and not result.get("confirm"):
        try:
            outcome = decisions.decide(
                approval.pk,
                user=request.user,
                # Edit-and-approve is an approval with arguments (unchanged ones are a no-op).
                decision="approve" if decision == "edit_approve" else decision,
                arguments=arguments,
                reason=request.POST.get("reason", "").strip(),
                answer=request.POST.get("answer", "").strip(),
                opened_at=opened_at(request),
                shown_args_hash=request.POST.get("shown_args_hash") or None,
                shown_preview_hash=request.POST.get("shown_preview_hash") or None,
                via="web",
            )
        except decisions.PreviewChanged as exc:
            status, result["message"], result["preview_changed"] = 409, exc.DETAIL, True
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
        # The outcome goes next to the buttons (in the page's live region), and the buttons
        # come back disabled once there is nothing left to press.
        context = {
            "approval": approval,
            "result": result,
            "field_errors": field_errors,
            "decided": _decided(result),
            "has_fields": approval.kind == Approval.Kind.ACTION
            and bool(arg_form.fields_for(approval.tool_object(), approval.args or {})),
            "shown_args_hash": args_hash(approval.tool, approval.args or {}),
            "oob": True,
        }
        html = render_to_string(DETAIL_TEMPLATE + "#decision-result", context, request)
        html += render_to_string(DETAIL_TEMPLATE + "#decision-buttons", context, request)
        if result.get("preview_changed"):
            # The fresh preview replaces the one on screen (and the hash the form sends).
            context.update(preview=previews.view(approval.preview), preview_changed=True)
            html += render_to_string(DETAIL_TEMPLATE + "#effect-preview", context, request)
        return HttpResponse(html, status=status)
    context = _detail_context(
        request,
        approval,
        result=result,
        field_errors=field_errors,
        submitted=request.POST,
        preview_changed=bool(result.get("preview_changed")),
    )
    return render(request, DETAIL_TEMPLATE, context, status=status)


def _needs_confirmation(request: HttpRequest, approval: Approval, decision: str) -> bool:
    """A plain approve of a high-risk or irreversible call, not yet confirmed for the call
    on screen. Someone the decision service would refuse (not allowed, already decided,
    shown another call) gets that refusal at once, not a confirmation first."""
    current = args_hash(approval.tool, approval.args or {})
    return (
        decision == "approve"
        and approval.status == Approval.Status.PENDING
        and approval.needs_confirmation
        and request.POST.get("shown_args_hash") == current
        and request.POST.get("confirmed", "") != current
        and not permissions.forbidden_reason(approval, approval.run, request.user, "approve")
    )


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


@require_POST
@login_required
def claim(request: SignedInRequest, pk) -> HttpResponse:
    """ "I'm on it" (or release it): tells the others with the approval open, and the queue,
    that someone is handling it. It blocks nobody's decision; it ends with the claimer's last
    open screen of the approval, with the decision or the expiry."""
    approval = _get_approval_for_user(request, pk, decide=True)
    status = 200
    if request.POST.get("claim") == "release":
        presence.release(approval, request.user)
    elif not presence.claim(approval, request.user):
        status = 409
    events.publish_presence_on_commit(approval.pk)
    events.publish_approvals_changed(approval.pk)
    context = {
        **stream_messages.presence_context(approval, request.user),
        "claim_refused": status == 409,
    }
    return render(request, DETAIL_TEMPLATE + "#approval-presence", context, status=status)
