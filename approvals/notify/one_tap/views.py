"""The one-tap decision page a link in the approval e-mail opens (./links.py says what a link
is and why it is safe). The same card as the full screen, sized for a phone:
the exact call, its effect, the evidence, the risk; Approve / Reject (and Answer for a
question). Decisions go through `approvals.decisions.decide` like every other one."""

from django.contrib.auth import authenticate
from django.contrib.auth.decorators import login_required
from django.core import signing
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from accounts.requests import SignedInRequest
from agentkit import previews
from runs import rendering
from runs.models import args_hash

from ... import arg_form, decisions, views
from ...evidence import card as evidence
from ...models import Approval
from . import links as one_tap

TEMPLATE = "approvals/one_tap.html"
REFUSED_TEMPLATE = "approvals/one_tap_refused.html"
CHOICES = ("approve", "reject", "answer")


@require_http_methods(["GET", "POST"])
@login_required  # the link never logs anyone in: the redirect back keeps it
def one_tap_page(request: SignedInRequest, token: str) -> HttpResponse:
    try:
        link = one_tap.read(token, request.user)
    except one_tap.LinkRefused as exc:
        return _refused(request, exc)
    approval = link.approval
    if not request.user.can_view:
        return _refused(request, one_tap.LinkRefused(403, "Your account cannot see approvals."))
    if not Approval.objects.visible_to(request.user).filter(pk=approval.pk).exists():
        # Sent before the user left the team that owns the agent: the link dies with it.
        return _refused(request, one_tap.LinkRefused(403, "Your teams do not see this approval."))
    if request.method == "GET":
        return _page(request, approval)

    decision = request.POST.get("decision", "")
    if decision not in CHOICES:
        return _page(request, approval, status=422, message="Choose approve, reject or answer.")
    if one_tap.needs_password(approval, decision) and not request.user.has_usable_password():
        # Signed in through single sign-on: there is no password here to confirm with.
        return _page(
            request,
            approval,
            status=403,
            message=f"Not approved: approving {_a(approval.confirmation_grounds)} call needs "
            "the full decision screen (your account signs in through single sign-on).",
        )
    if one_tap.needs_password(approval, decision) and not _password_confirms(request):
        one_tap.password_failed(link)
        return _page(
            request,
            approval,
            status=403,
            message="Not approved: enter your password to approve "
            f"{_a(approval.confirmation_grounds)} call.",
        )
    try:
        with transaction.atomic():
            # The link is spent only if the decision is recorded: both commit or neither.
            one_tap.consume(link)
            outcome = decisions.decide(
                approval.pk,
                user=request.user,
                decision=decision,
                reason=request.POST.get("reason", "").strip(),
                answer=request.POST.get("answer", "").strip(),
                opened_at=views.opened_at(request),
                shown_args_hash=request.POST.get("shown_args_hash") or "",
                shown_preview_hash=request.POST.get("shown_preview_hash") or None,
                via="one_tap",
            )
    except one_tap.LinkRefused as exc:
        return _refused(request, exc)
    except decisions.PreviewChanged as exc:
        # Our transaction rolled the stored preview back with the link: kept again here, and
        # the link still works for the decision on the fresh preview.
        decisions.store_preview(approval.pk, exc.preview)
        approval.refresh_from_db()
        return _page(request, approval, status=409, message=exc.DETAIL, preview_changed=True)
    except decisions.DecisionError as exc:
        approval.refresh_from_db()
        return _page(request, approval, status=exc.status, message=str(exc))
    return _page(request, outcome, status=200, message=_done(decision, outcome), ok=True)


def _password_confirms(request: HttpRequest) -> bool:
    """The signed-in person's password, checked as a sign-in is: through `authenticate`, so
    failures count toward the lockout (django-axes, accounts/lockouts.py), and a locked-out
    person is refused without the password being checked (the middleware answers 429)."""
    user = authenticate(
        request,
        username=request.user.get_username(),
        password=request.POST.get("password", ""),
    )
    return user is not None and user.pk == request.user.pk


def _page(
    request: HttpRequest,
    approval: Approval,
    *,
    status: int = 200,
    message: str = "",
    ok=False,
    preview_changed: bool = False,
) -> HttpResponse:
    context = {
        "approval": approval,
        "run": approval.run,
        "args_text": arg_form.call_text(approval.tool_object(), approval.args or {})
        if approval.kind == Approval.Kind.ACTION
        else rendering.pretty(approval.args or {}),
        "shown_args_hash": args_hash(approval.tool, approval.args or {}),
        "effect": approval.effect() if approval.kind == Approval.Kind.ACTION else "",
        "preview": previews.view(approval.preview),
        "preview_changed": preview_changed,
        "evidence": evidence.for_approval(approval),
        "needs_password": approval.kind == Approval.Kind.ACTION and approval.needs_confirmation,
        # When the page was shown travels signed with the decision, as on the full screen.
        "opened_token": signing.dumps(timezone.now().isoformat(), salt=views.OPENED_SALT),
        "can_decide": approval.status == Approval.Status.PENDING and not ok,
        "result": {
            "status": status,
            "message": message,
            "ok": ok,
            "preview_changed": preview_changed,
        }
        if message
        else None,
    }
    return render(request, TEMPLATE, context, status=status)


def _refused(request: HttpRequest, exc: one_tap.LinkRefused) -> HttpResponse:
    return render(request, REFUSED_TEMPLATE, {"message": exc.message}, status=exc.status)


def _done(decision: str, approval: Approval) -> str:
    if approval.status == Approval.Status.PENDING:
        return "Your approval is recorded; more approvers are needed before the call runs."
    return {"approve": "Approved.", "reject": "Rejected.", "answer": "Answered."}[decision]


def _a(words: str) -> str:
    return ("an " if words[:1] in ("a", "e", "i", "o", "u") else "a ") + words
