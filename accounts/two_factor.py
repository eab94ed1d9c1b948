"""Two-factor sign-in for password sign-ins: the second factors (a TOTP app, django-otp's;
security keys and passkeys, accounts/passkeys.py; recovery codes as their fallback,
accounts/recovery_codes.py), the sign-in that waits between the password and the second
factor, and the policy that makes people enrol.
Why and how: docs/design/modules.md."""

import logging
import time
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.auth import login as auth_login
from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django_otp import login as otp_login
from django_otp.plugins.otp_totp.models import TOTPDevice

from .models import Role, User, WebAuthnCredential

log = logging.getLogger("agentops.security")

PENDING_KEY = "agentops_mfa_pending"
SSO_BACKEND = "accounts.sso.SsoBackend"
# Wrong codes one waiting sign-in may try before the password must be given again (on top
# of django-otp's per-device throttling).
MAX_TRIES = 5
RANKS = [Role.VIEWER, Role.OPERATOR, Role.APPROVER, Role.ADMIN]


def confirmed_device(user: User) -> TOTPDevice | None:
    return TOTPDevice.objects.devices_for_user(user, confirmed=True).first()


def has_second_factor(user: User) -> bool:
    """An authenticator app or a security key; recovery codes alone are only their fallback."""
    return (
        confirmed_device(user) is not None
        or WebAuthnCredential.objects.filter(user=user, confirmed=True).exists()
    )


def signed_in_by_password(request: HttpRequest) -> bool:
    return request.session.get(BACKEND_SESSION_KEY) != SSO_BACKEND


def must_enrol(user: User, session) -> bool:
    """AGENTOPS_MFA_REQUIRED covers this password-signed-in person, who has no device yet."""
    return bool(
        settings.MFA_REQUIRED
        and user.is_authenticated
        and session.get(BACKEND_SESSION_KEY) != SSO_BACKEND
        and required_for(user)
        and not has_second_factor(user)
    )


def required_for(user: User) -> bool:
    """AGENTOPS_MFA_REQUIRED: "all", or a role name meaning that role and above."""
    scope = settings.MFA_REQUIRED
    if not scope:
        return False
    if scope == "all":
        return True
    return any(user.has_role(role) for role in RANKS[RANKS.index(scope) :])


# The sign-in waiting for its code.


@dataclass
class Pending:
    user: User
    backend: str
    next_url: str
    tries: int


def start(request: HttpRequest, user: User, next_url: str) -> None:
    """Hold a password-checked sign-in until its code comes. The session key is rotated, as
    login() does, so a session planted before the password cannot ride on it; whoever was
    signed in on it is not any more (as login() does for another user)."""
    if SESSION_KEY in request.session:
        request.session.flush()
        request.user = AnonymousUser()
    else:
        request.session.cycle_key()
    request.session[PENDING_KEY] = {
        "user_id": user.pk,
        "backend": user.backend,
        "hash": user.get_session_auth_hash(),
        "expires": time.time() + settings.MFA_PENDING_SECONDS,
        "next": next_url,
        "tries": 0,
    }
    log.info(
        "%r gave a correct password; a one-time code is asked",
        user.get_username(),
        extra={"security_event": "mfa_challenge", "username": user.get_username()},
    )


def pending(request: HttpRequest) -> Pending | None:
    """The waiting sign-in, or None (none, expired, or the account changed meanwhile)."""
    state = request.session.get(PENDING_KEY)
    if not isinstance(state, dict):
        return None
    if time.time() > state.get("expires", 0):
        forget(request)
        return None
    user = get_user_model().objects.filter(pk=state.get("user_id"), is_active=True).first()
    if user is None or user.get_session_auth_hash() != state.get("hash"):
        forget(request)
        return None
    return Pending(user, state["backend"], state.get("next", ""), state.get("tries", 0))


def count_failure(request: HttpRequest) -> bool:
    """One more wrong code; False once the waiting sign-in has used all its tries."""
    state = request.session[PENDING_KEY]
    state["tries"] = state.get("tries", 0) + 1
    request.session.modified = True
    if state["tries"] >= MAX_TRIES:
        forget(request)
        return False
    return True


def forget(request: HttpRequest) -> None:
    request.session.pop(PENDING_KEY, None)


def finish(request: HttpRequest, waiting: Pending, device, *, how: str, event: str) -> str:
    """The second factor passed: sign the waiting person in, their session verified with
    `device` (django_otp.login), and say so in the security log. Returns where to go next."""
    forget(request)
    waiting.user.backend = waiting.backend
    auth_login(request, waiting.user)
    otp_login(request, device)
    log.info(
        "%r signed in with a password and %s",
        waiting.user.get_username(),
        how,
        extra={"security_event": event, "username": waiting.user.get_username()},
    )
    if url_has_allowed_host_and_scheme(waiting.next_url, {request.get_host()}, request.is_secure()):
        return waiting.next_url
    return reverse("runs:dashboard")


# The policy.


def _exempt(request: HttpRequest) -> bool:
    path = request.path_info
    if path.startswith(settings.STATIC_URL) or path.startswith("/accounts/two-factor/"):
        return True
    if path in (reverse("logout"), reverse("login"), "/healthz"):
        return True
    # API callers with a token: the token is their credential, not this session.
    return path.startswith("/api/") and "HTTP_AUTHORIZATION" in request.META


def require_enrolment(get_response):
    """Middleware: a password-signed-in person whom AGENTOPS_MFA_REQUIRED covers and who has
    no confirmed device is sent to the enrolment page before any other page."""

    def middleware(request: HttpRequest) -> HttpResponse:
        if (
            settings.MFA_REQUIRED
            and request.user.is_authenticated
            and not _exempt(request)
            and must_enrol(request.user, request.session)
        ):
            if request.path_info.startswith("/api/"):
                return JsonResponse(
                    {"detail": "set up two-factor sign-in first (/accounts/two-factor/)"},
                    status=403,
                )
            url = reverse("two_factor:setup")
            if request.method == "GET":
                url += "?" + urlencode({"next": request.get_full_path()})
            return redirect(url)
        return get_response(request)

    return middleware
