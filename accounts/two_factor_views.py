"""The two-factor pages: enrolment (add a TOTP device, confirm it with a code, remove it with
a code) for a signed-in person, and the second step of a password sign-in (accounts/views.py
starts it; accounts/two_factor.py keeps its state)."""

import logging
from base64 import b32encode

from django import forms
from django.contrib import messages
from django.contrib.auth import login as auth_login
from django.contrib.auth.decorators import login_not_required, login_required
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_otp import login as otp_login
from django_otp import verify_token
from django_otp.plugins.otp_totp.models import TOTPDevice

from . import two_factor

log = logging.getLogger("agentops.security")


class CodeForm(forms.Form):
    code = forms.RegexField(
        regex=r"^[0-9]{6}$",
        max_length=6,
        strip=True,
        error_messages={
            "invalid": "Enter the 6-digit code your app shows.",
            "required": "Enter the 6-digit code your app shows.",
            "max_length": "Enter the 6-digit code your app shows.",
        },
        widget=forms.TextInput(
            attrs={"autocomplete": "one-time-code", "inputmode": "numeric", "autofocus": True}
        ),
    )


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


def _unconfirmed(user) -> TOTPDevice | None:
    return TOTPDevice.objects.devices_for_user(user, confirmed=False).first()


def _setup_page(request: HttpRequest, form: CodeForm | None = None, status=200) -> HttpResponse:
    user = request.user
    confirmed = two_factor.confirmed_device(user)
    new = None if confirmed else _unconfirmed(user)
    next_url = request.POST.get("next") or request.GET.get("next") or ""
    if not url_has_allowed_host_and_scheme(next_url, {request.get_host()}):
        next_url = ""
    context = {
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
def setup(request: HttpRequest) -> HttpResponse:
    return _setup_page(request)


@require_POST
@login_required
def start(request: HttpRequest) -> HttpResponse:
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
def confirm(request: HttpRequest) -> HttpResponse:
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
    if url_has_allowed_host_and_scheme(next_url, {request.get_host()}, request.is_secure()):
        return redirect(next_url)
    return redirect("two_factor:setup")


@require_POST
@login_required
def remove(request: HttpRequest) -> HttpResponse:
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


@login_not_required
@require_http_methods(["GET", "POST"])
@never_cache
def verify(request: HttpRequest) -> HttpResponse:
    """The second step of a password sign-in: a current code signs the waiting person in."""
    waiting = two_factor.pending(request)
    if waiting is None:
        messages.error(request, "Your sign-in expired or was not started: sign in again.")
        return redirect("login")
    form = CodeForm(request.POST if request.method == "POST" else None)
    if request.method == "POST":
        device = two_factor.confirmed_device(waiting.user)
        if device is None:  # removed meanwhile (by an admin): the password alone will do
            two_factor.forget(request)
            return redirect("login")
        outcome = _check(waiting.user, device, form)
        if outcome == "ok":
            two_factor.forget(request)
            waiting.user.backend = waiting.backend
            auth_login(request, waiting.user)
            otp_login(request, device)
            log.info(
                "%r signed in with a password and a one-time code",
                waiting.user.get_username(),
                extra={"security_event": "mfa_verified", "username": waiting.user.get_username()},
            )
            if url_has_allowed_host_and_scheme(
                waiting.next_url, {request.get_host()}, request.is_secure()
            ):
                return redirect(waiting.next_url)
            return redirect("runs:dashboard")
        if outcome != "malformed":  # a well-formed code, but wrong or refused while throttled
            log.warning(
                "wrong one-time code for %r",
                waiting.user.get_username(),
                extra={"security_event": "mfa_failure", "username": waiting.user.get_username()},
            )
            if not two_factor.count_failure(request):
                messages.error(request, "Too many wrong codes: sign in again.")
                return redirect("login")
        return render(request, "registration/two_factor_verify.html", {"form": form}, status=400)
    return render(request, "registration/two_factor_verify.html", {"form": form})
