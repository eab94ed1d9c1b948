"""Security keys and passkeys: adding and removing them on the security page, and signing in
with one at the second step of a password sign-in (accounts/passkeys.py does the WebAuthn).

The browser's side is static/js/passkeys.js: it asks for options (a POST, so a challenge is
made only with the CSRF token), calls navigator.credentials, and posts the answer as JSON.
Answers are JSON: {"redirect": url} on success, {"error": words} with a 400 otherwise.
"""

import logging

from django.contrib import messages
from django.contrib.auth.decorators import login_not_required, login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from . import passkeys, recovery_codes, two_factor
from .models import WebAuthnCredential
from .requests import SignedInRequest
from .two_factor_views import setup_url

log = logging.getLogger("agentops.security")


def _options(body: str) -> HttpResponse:
    return HttpResponse(body, content_type="application/json")


def _refused(error: passkeys.CeremonyError) -> JsonResponse:
    return JsonResponse({"error": str(error)}, status=400)


@require_POST
@login_required
@never_cache
def register_options(request: SignedInRequest) -> HttpResponse:
    return _options(passkeys.registration_options(request, request.user))


@require_POST
@login_required
def register(request: SignedInRequest) -> JsonResponse:
    try:
        key = passkeys.register(request, request.user)
    except passkeys.CeremonyError as error:
        return _refused(error)
    messages.success(request, f"Security key “{key.name}” added.")
    # A first second factor comes with recovery codes, which the security page then shows.
    recovery_codes.offer_first(request, request.user)
    return JsonResponse({"redirect": setup_url(request, request.GET.get("next", ""))})


@require_POST
@login_required
def remove(request: HttpRequest, pk: int) -> HttpResponse:
    key = get_object_or_404(WebAuthnCredential, pk=pk, user=request.user)
    key.delete()
    log.warning(
        "%r removed a security key (%s)",
        request.user.get_username(),
        key.name,
        extra={"security_event": "webauthn_removed", "username": request.user.get_username()},
    )
    messages.success(request, f"Security key “{key.name}” removed.")
    return redirect("two_factor:setup")


@login_not_required
@require_POST
@never_cache
def verify_options(request: HttpRequest) -> HttpResponse:
    waiting = two_factor.pending(request)
    if waiting is None:
        return JsonResponse({"error": "Your sign-in expired: sign in again."}, status=400)
    if not passkeys.credentials(waiting.user).exists():
        return JsonResponse({"error": "No security key is set up for this account."}, status=400)
    return _options(passkeys.authentication_options(request, waiting.user))


@login_not_required
@require_POST
@never_cache
def verify(request: HttpRequest) -> JsonResponse:
    """The second step of a password sign-in with a security key."""
    waiting = two_factor.pending(request)
    if waiting is None:
        return JsonResponse({"error": "Your sign-in expired: sign in again."}, status=400)
    try:
        key = passkeys.authenticate(request, waiting.user)
    except passkeys.CeremonyError as error:
        log.warning(
            "refused security key for %r",
            waiting.user.get_username(),
            extra={"security_event": "mfa_failure", "username": waiting.user.get_username()},
        )
        if not two_factor.count_failure(request):
            return JsonResponse(
                {"error": "Too many failed tries: sign in again.", "redirect": reverse("login")},
                status=400,
            )
        return _refused(error)
    target = two_factor.finish(
        request, waiting, key, how=f"a security key ({key.name})", event="mfa_verified"
    )
    return JsonResponse({"redirect": target})
