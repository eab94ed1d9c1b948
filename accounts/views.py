"""The sign-in page: the password form (unless turned off) and, with single sign-on on, the
button that starts it (a POST, so it carries the CSRF token, to allauth's OpenID Connect
login view)."""

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import urlencode


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


def login(request: HttpRequest) -> HttpResponse:
    """django.contrib.auth's LoginView, plus the single sign-on button; with password sign-in
    turned off a posted password is refused (403) before it is checked."""
    context = sso_context(request)
    if request.method == "POST" and not context["password_login"]:
        context["refused"] = "Password sign-in is turned off here: use single sign-on."
        return render(request, "registration/login.html", context, status=403)
    return auth_views.LoginView.as_view(extra_context=context)(request)
