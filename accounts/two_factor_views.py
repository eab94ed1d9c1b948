"""The two-factor pages: the security page (an authenticator app: add it, confirm it with a
code, remove it with a code; the security keys and recovery codes it also shows have views of
their own, accounts/passkey_views.py and accounts/recovery_code_views.py) for a signed-in
person, and the code form at the second step of a password sign-in (accounts/views.py starts
it; accounts/two_factor.py keeps its state)."""

import logging
from base64 import b32encode

from django.contrib import messages
from django.contrib.auth.decorators import login_not_required, login_required
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_otp import login as otp_login
from django_otp import verify_token
from django_otp.plugins.otp_totp.models import TOTPDevice

from . import passkeys, recovery_codes, two_factor
from .requests import SignedInRequest
from .two_factor_forms import CodeForm, RecoveryCodeForm

log = logging.getLogger("agentops.security")


def _check(user, device: TOTPDevice, form: CodeForm) -> str:
    """The code against the device, locked while checked (django-otp's throttling counts):
    "ok", or why not ("malformed", "throttled", "wrong"), the form then carrying the error."""
    if not form.is_valid():
        return "malformed"
    device.refresh_from_db()
    allowed, _ = device.verify_is_allowed()
    if not allowed:
        form.add_error("code", "Too many wrong codes: wait a few seconds, then try again.")
        return "throttled"
    if verify_token(user, device.persistent_id, form.cleaned_data["code"]):
        return "ok"
    form.add_error("code", "That code is not right (or was already used).")
    return "wrong"


def setup_url(request: HttpRequest, next_url: str = "") -> str:
    """The security page, carrying on a `next` of this site (where a person sent to enrol was
    going)."""
    url = reverse("two_factor:setup")
    if next_url and url_has_allowed_host_and_scheme(
        next_url, {request.get_host()}, request.is_secure()
    ):
        url += "?" + urlencode({"next": next_url})
    return url


def show_fresh(request: HttpRequest, next_url: str = "") -> HttpResponse:
    """To the security page, which shows the codes just made once (then a link on to `next`)."""
    return redirect(setup_url(request, next_url))


def _unconfirmed(user) -> TOTPDevice | None:
    return TOTPDevice.objects.devices_for_user(user, confirmed=False).first()


def _setup_page(request: SignedInRequest, form: CodeForm | None = None, status=200) -> HttpResponse:
    user = request.user
    confirmed = two_factor.confirmed_device(user)
    new = None if confirmed else _unconfirmed(user)
    next_url = request.POST.get("next") or request.GET.get("next") or ""
    if not url_has_allowed_host_and_scheme(next_url, {request.get_host()}):
        next_url = ""
    context = {
        "has_second_factor": two_factor.has_second_factor(user),
        "keys": passkeys.credentials(user),
        "recovery_codes_left": recovery_codes.remaining(user),
        "has_recovery_codes": recovery_codes.device(user) is not None,
        # Codes just made: shown on this response only (the session forgets them now).
        "fresh_codes": request.session.pop(recovery_codes.FRESH_KEY, None),
        "confirmed": confirmed,
        "new": new,
        "key": b32encode(new.bin_key).decode() if new else "",
        "required": two_factor.required_for(user),
        "sso_session": not two_factor.signed_in_by_password(request),
        "form": form or CodeForm(),
        "next": next_url,
    }
    return render(request, "accounts/two_factor.html", context, status=status)


@require_GET
@login_required
@never_cache
def setup(request: SignedInRequest) -> HttpResponse:
    return _setup_page(request)


@require_POST
@login_required
def start(request: SignedInRequest) -> HttpResponse:
    """A new secret, unconfirmed until a code from it comes back."""
    if two_factor.confirmed_device(request.user):
        messages.error(request, "Two-factor sign-in is already set up: remove it first.")
        return redirect("two_factor:setup")
    with transaction.atomic():
        TOTPDevice.objects.filter(user=request.user, confirmed=False).delete()
        TOTPDevice.objects.create(user=request.user, name="Authenticator app", confirmed=False)
    return _setup_page(request)


@require_POST
@login_required
def confirm(request: SignedInRequest) -> HttpResponse:
    device = _unconfirmed(request.user)
    if device is None:
        messages.error(request, "Start the setup first.")
        return redirect("two_factor:setup")
    form = CodeForm(request.POST)
    if _check(request.user, device, form) != "ok":
        return _setup_page(request, form, status=400)
    TOTPDevice.objects.filter(pk=device.pk).update(confirmed=True)
    device.confirmed = True
    otp_login(request, device)
    log.info(
        "%r set up two-factor sign-in",
        request.user.get_username(),
        extra={"security_event": "mfa_enrolled", "username": request.user.get_username()},
    )
    messages.success(request, "Two-factor sign-in is on: the next password sign-in asks a code.")
    next_url = request.POST.get("next", "")
    if recovery_codes.offer_first(request, request.user):
        return show_fresh(request, next_url)
    if url_has_allowed_host_and_scheme(next_url, {request.get_host()}, request.is_secure()):
        return redirect(next_url)
    return redirect("two_factor:setup")


@require_POST
@login_required
def remove(request: SignedInRequest) -> HttpResponse:
    device = two_factor.confirmed_device(request.user)
    if device is None:
        return redirect("two_factor:setup")
    form = CodeForm(request.POST)
    if _check(request.user, device, form) != "ok":
        return _setup_page(request, form, status=400)
    TOTPDevice.objects.filter(user=request.user).delete()
    log.warning(
        "%r removed two-factor sign-in",
        request.user.get_username(),
        extra={"security_event": "mfa_removed", "username": request.user.get_username()},
    )
    messages.success(request, "Two-factor sign-in is off.")
    return redirect("two_factor:setup")


def verify_page(
    request: HttpRequest, waiting: two_factor.Pending, status: int = 200, **forms
) -> HttpResponse:
    """The second step's page: the code form for an app, the button for a security key, and
    the recovery code form, for whichever this person has."""
    user = waiting.user
    context = {
        "form": forms.get("form") or CodeForm(),
        "recovery_form": forms.get("recovery_form") or RecoveryCodeForm(),
        "has_app": two_factor.confirmed_device(user) is not None,
        "has_keys": passkeys.credentials(user).exists(),
        "has_recovery_codes": recovery_codes.remaining(user) > 0,
    }
    return render(request, "registration/two_factor_verify.html", context, status=status)


def refuse(request: HttpRequest, waiting: two_factor.Pending, what: str) -> HttpResponse | None:
    """A wrong second factor: logged, counted against the waiting sign-in; once it has used
    all its tries, the redirect that makes the person give the password again."""
    log.warning(
        "wrong %s for %r",
        what,
        waiting.user.get_username(),
        extra={"security_event": "mfa_failure", "username": waiting.user.get_username()},
    )
    if not two_factor.count_failure(request):
        messages.error(request, "Too many wrong codes: sign in again.")
        return redirect("login")
    return None


@login_not_required
@require_http_methods(["GET", "POST"])
@never_cache
def verify(request: HttpRequest) -> HttpResponse:
    """The second step of a password sign-in: a current code signs the waiting person in."""
    waiting = two_factor.pending(request)
    if waiting is None:
        messages.error(request, "Your sign-in expired or was not started: sign in again.")
        return redirect("login")
    if request.method == "GET":
        return verify_page(request, waiting)
    if not two_factor.has_second_factor(waiting.user):
        # Removed meanwhile (by an admin): the password alone will do, given again.
        two_factor.forget(request)
        return redirect("login")
    form = CodeForm(request.POST)
    device = two_factor.confirmed_device(waiting.user)
    if device is None:
        form.is_valid()
        form.add_error("code", "No authenticator app is set up for this account.")
        return verify_page(request, waiting, status=400, form=form)
    outcome = _check(waiting.user, device, form)
    if outcome == "ok":
        return redirect(
            two_factor.finish(request, waiting, device, how="a one-time code", event="mfa_verified")
        )
    # A well-formed code, but wrong or refused while throttled, counts against the sign-in.
    if outcome != "malformed" and (gone := refuse(request, waiting, "one-time code")):
        return gone
    return verify_page(request, waiting, status=400, form=form)
