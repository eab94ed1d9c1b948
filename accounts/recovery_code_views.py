"""Recovery codes: making a new set on the security page (the old codes stop working), and
spending one at the second step of a password sign-in instead of a code or a key."""

import logging

from django.contrib import messages
from django.contrib.auth.decorators import login_not_required, login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from . import recovery_codes, two_factor
from .requests import SignedInRequest
from .two_factor_forms import CodeForm, RecoveryCodeForm
from .two_factor_views import refuse, show_fresh, verify_page

log = logging.getLogger("agentops.security")


@require_POST
@login_required
def regenerate(request: SignedInRequest) -> HttpResponse:
    if not two_factor.has_second_factor(request.user):
        messages.error(request, "Set up an authenticator app or a security key first.")
        return redirect("two_factor:setup")
    request.session[recovery_codes.FRESH_KEY] = recovery_codes.regenerate(request.user)
    log.warning(
        "%r made new recovery codes (the old ones no longer work)",
        request.user.get_username(),
        extra={
            "security_event": "recovery_codes_regenerated",
            "username": request.user.get_username(),
        },
    )
    return show_fresh(request)


@login_not_required
@require_POST
@never_cache
def verify(request: HttpRequest) -> HttpResponse:
    """The second step of a password sign-in with a recovery code, which is then spent."""
    waiting = two_factor.pending(request)
    if waiting is None:
        messages.error(request, "Your sign-in expired or was not started: sign in again.")
        return redirect("login")
    form = RecoveryCodeForm(request.POST)
    if not form.is_valid():
        return verify_page(request, waiting, status=400, recovery_form=form, form=CodeForm())
    outcome = recovery_codes.use(waiting.user, form.cleaned_data["recovery_code"])
    if outcome == "ok":
        left = recovery_codes.remaining(waiting.user)
        target = two_factor.finish(
            request,
            waiting,
            recovery_codes.device(waiting.user),
            how=f"a recovery code ({left} left)",
            event="mfa_recovery_code_used",
        )
        messages.warning(
            request,
            f"You signed in with a recovery code: {left} left. "
            "Make new ones on the security page if you are running low.",
        )
        return redirect(target)
    if outcome == "throttled":
        form.add_error("recovery_code", "Too many wrong codes: wait a few seconds, then try again.")
    else:
        form.add_error("recovery_code", "That recovery code is not right (or was already used).")
    if gone := refuse(request, waiting, "recovery code"):
        return gone
    return verify_page(request, waiting, status=400, recovery_form=form, form=CodeForm())
