"""Standing grants on the web: the card's "allow more than this call" form, the grants page
(active ones with revoke buttons, and the ones that ended), revoking, and resuming a run an
expiry halted. The rules are approvals/grants/models.py's (and the expiry's approvals/decisions.py);
this module turns forms into their arguments and their refusals into form errors."""

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from accounts.requests import SignedInRequest

from .. import decisions
from ..models import Grant
from ..views import DETAIL_TEMPLATE, _detail_context, _get_approval_for_user
from . import models as grants
from .forms import GrantForm, card_context

GRANTS_TEMPLATE = "approvals/grants.html"


@require_POST
@login_required
def grant_from_card(request: SignedInRequest, pk) -> HttpResponse:
    """Approve the call on the card and allow calls like it (approvals/grants/models.py)."""
    approval = _get_approval_for_user(request, pk, decide=True)
    form = GrantForm(request.POST, approval=approval)
    status, message = 422, "Some fields of the grant could not be read."
    if form.is_valid():
        try:
            grants.grant(
                approval.pk,
                user=request.user,
                bounds=form.bounds(),
                shown_args_hash=request.POST.get("shown_args_hash") or None,
                via="web",
            )
        except grants.GrantRefused as exc:
            status, message = exc.status, exc.message
            for field, errors in exc.errors.items():
                target = field if field in form.fields else None
                for error in errors:
                    form.add_error(target, error)
        except decisions.DecisionError as exc:
            status, message = exc.status, exc.message
        else:
            return redirect(reverse("approvals:detail", args=[approval.pk]) + "#grants")
    approval.refresh_from_db()
    context = _detail_context(
        request, approval, grant_result={"status": status, "message": message}
    )
    context.update(card_context(approval, request.user, form))
    return render(request, DETAIL_TEMPLATE, context, status=status)


@require_GET
@login_required
def grants_page(request: SignedInRequest) -> HttpResponse:
    if not request.user.can_approve:
        raise PermissionDenied
    now = timezone.now()
    active = list(
        grants.visible_to(request.user, grants.active(now)).select_related("run", "from_approval")
    )
    ended = (
        grants.visible_to(request.user)
        .exclude(pk__in=[g.pk for g in active])
        .select_related("run")
        .order_by("-granted_at")[:50]
    )
    context = {
        "active": [(g, grants.describe(g)) for g in active],
        "ended": [(g, grants.describe(g)) for g in ended],
    }
    return render(request, GRANTS_TEMPLATE, context)


@require_POST
@login_required
def revoke_grant(request: SignedInRequest, pk: int) -> HttpResponse:
    """Revoke now; back to where the button was (the grants page, or an approval card)."""
    if not request.user.can_approve:
        raise PermissionDenied
    try:
        grants.revoke(pk, user=request.user)
    except Grant.DoesNotExist:
        return HttpResponse("No such grant.", status=404)
    except grants.GrantRefused as exc:
        if exc.status != 409:  # already revoked: the page shows it so
            return HttpResponse(exc.message, status=exc.status)
    back = request.POST.get("next", "")
    if back.startswith("/approvals/") and "//" not in back:
        return redirect(back)
    return redirect("approvals:grants")


@require_POST
@login_required
def resume_halted(request: SignedInRequest, pk) -> HttpResponse:
    """Resume the run an expiry of this approval halted (decisions.resume_halted)."""
    approval = _get_approval_for_user(request, pk)
    try:
        decisions.resume_halted(approval.run_id, user=request.user)
    except decisions.DecisionForbidden as exc:
        raise PermissionDenied(exc.message) from None
    except decisions.DecisionConflict as exc:
        context = _detail_context(request, approval, halt_result={"message": exc.message})
        return render(request, DETAIL_TEMPLATE, context, status=409)
    return redirect("runs:detail", approval.run_id)
