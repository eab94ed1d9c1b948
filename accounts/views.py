"""The sign-in page: the password form (unless turned off) and, with single sign-on on, the
button that starts it (a POST, so it carries the CSRF token, to allauth's OpenID Connect
login view); and sign-out, which for a single sign-on session ends the provider's too."""

import logging

from django.conf import settings
from django.contrib.auth import logout as auth_logout
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_protect
from django.views.decorators.http import require_POST

from . import provider_logout, two_factor

log = logging.getLogger("agentops.security")


def sso_context(request: HttpRequest) -> dict:
    if not settings.SSO_ENABLED:
        return {"password_login": True, "sso": None}
    url = reverse(
        "openid_connect_login", kwargs={"provider_id": settings.AGENTOPS_SSO["PROVIDER_ID"]}
    )
    next_url = request.POST.get("next") or request.GET.get("next")
    if next_url:
        url += "?" + urlencode({"next": next_url})
    return {
        "password_login": settings.PASSWORD_LOGIN,
        "sso": {"url": url, "name": settings.AGENTOPS_SSO["PROVIDER_NAME"]},
    }


def login(request: HttpRequest) -> HttpResponseBase:
    """django.contrib.auth's LoginView, plus the single sign-on button; with password sign-in
    turned off a posted password is refused (403) before it is checked."""
    context = sso_context(request)
    if request.method == "POST" and not context["password_login"]:
        context["refused"] = "Password sign-in is turned off here: use single sign-on."
        return render(request, "registration/login.html", context, status=403)
    return PasswordThenCodeLoginView.as_view(extra_context=context)(request)


class PasswordThenCodeLoginView(auth_views.LoginView):
    """A correct password of a person with a second factor (an app or a security key) does not
    sign them in yet: the sign-in waits in the session for it (accounts/two_factor.py)."""

    def form_valid(self, form):
        user = form.get_user()
        if not two_factor.has_second_factor(user):
            return super().form_valid(form)
        # get_success_url() validates `next` (url_has_allowed_host_and_scheme).
        two_factor.start(self.request, user, self.get_success_url())
        return redirect("two_factor:verify")


@require_POST
@csrf_protect
@never_cache
def logout(request: HttpRequest) -> HttpResponse:
    """Sign out here (a POST with the CSRF token, as django.contrib.auth's LogoutView), then,
    for a person who signed in through a provider offering RP-initiated logout, on to the
    provider to end its session too (accounts/provider_logout.py)."""
    at_provider = provider_logout.end_session_url(request)  # before the session is flushed
    who = request.user.get_username() if request.user.is_authenticated else ""
    auth_logout(request)
    if at_provider:
        log.info(
            "%r signed out, and is sent to the identity provider to sign out there too",
            who,
            extra={"security_event": "sso_logout", "username": who},
        )
        return redirect(at_provider)
    return redirect(settings.LOGOUT_REDIRECT_URL or settings.LOGIN_URL)
