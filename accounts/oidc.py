"""django-allauth's hooks for OpenID Connect sign-in (loaded only when AGENTOPS_OIDC_ISSUER is
set: settings name these adapters, and allauth's pages are routed only then).
Why and how: docs/design/modules.md."""

import logging

from allauth.account.adapter import DefaultAccountAdapter
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from allauth.socialaccount.models import SocialApp, SocialLogin
from allauth.socialaccount.providers.oauth2.views import OAuth2CallbackView
from allauth.socialaccount.providers.openid_connect.views import OpenIDConnectOAuth2Adapter
from django.contrib.auth.decorators import login_not_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from . import provider_logout, sso
from .models import User

log = logging.getLogger("agentops.security")
BACKEND = "accounts.sso.SsoBackend"


def refresh_roles(user: User, sociallogin: SocialLogin) -> None:
    claims = sso.merged_claims(sociallogin.account.extra_data or {})
    mapping = sso.configured_mapping()
    added, removed = sso.sync_roles(user, mapping.roles_for(claims))
    joined, left = sso.sync_teams(user, mapping.teams_for(claims))
    if joined or left:
        log.warning(
            "single sign-on changed teams of %r: joined or changed %s, left %s",
            user.get_username(),
            sorted(joined) or "none",
            sorted(left) or "none",
            extra={"security_event": "sso_teams", "username": user.get_username()},
        )
    if added or removed:
        log.warning(
            "single sign-on changed roles of %r: added %s, removed %s",
            user.get_username(),
            sorted(added) or "none",
            sorted(removed) or "none",
            extra={"security_event": "sso_roles", "username": user.get_username()},
        )


# What the callback request learnt for sign-out, until the person is signed in.
_PENDING_LOGOUT = "_agentops_provider_logout"


class _LogoutAwareAdapter(OpenIDConnectOAuth2Adapter):
    def parse_token(self, data):
        token = super().parse_token(data)
        # On the request, not the token: allauth may serialise the login between here and
        # the session (then sign-out is local only, as with a provider offering none).
        setattr(
            self.request,
            _PENDING_LOGOUT,
            {
                "endpoint": str(self.openid_config.get("end_session_endpoint") or ""),
                "id_token": str(data.get("id_token") or ""),
                "client_id": self.get_provider().app.client_id,
            },
        )
        return token


@login_not_required
def callback(request: HttpRequest, provider_id: str) -> HttpResponse:
    """allauth's OpenID Connect callback (its `callback` view), with the adapter above."""
    try:
        return OAuth2CallbackView.adapter_view(_LogoutAwareAdapter(request, provider_id))(request)
    except SocialApp.DoesNotExist:
        raise Http404 from None


class AccountAdapter(DefaultAccountAdapter):
    def is_open_for_signup(self, request: HttpRequest) -> bool:
        # No local sign-up page: accounts come from the provider (or an admin).
        return False

    def respond_user_inactive(self, request: HttpRequest, user: User) -> HttpResponse:
        # A person deactivated here stays out whatever the provider says.
        return render(
            request,
            "socialaccount/authentication_error.html",
            {"reason": "Your agentops account is deactivated: ask an administrator."},
            status=403,
        )

    def login(self, request: HttpRequest, user: User) -> None:
        # Recorded in the session, so the sockets' re-check (runs/access.py) knows it.
        user.backend = BACKEND
        super().login(request, user)

    def post_login(self, request: HttpRequest, user: User, **kwargs) -> HttpResponse:
        # The session is the signed-in one now (its key rotated at login): keep what
        # sign-out at the provider needs, or forget a previous sign-in's.
        pending = getattr(request, _PENDING_LOGOUT, None) or {}
        provider_logout.remember(
            request.session,
            endpoint=pending.get("endpoint", ""),
            id_token=pending.get("id_token", ""),
            client_id=pending.get("client_id", ""),
        )
        return super().post_login(request, user, **kwargs)


class SocialAccountAdapter(DefaultSocialAccountAdapter):
    def is_open_for_signup(self, request: HttpRequest, sociallogin: SocialLogin) -> bool:
        # Whoever the provider lets through gets an account; their roles say what they see.
        return True

    def on_authentication_error(
        self, request: HttpRequest, provider, error=None, exception=None, extra_context=None
    ) -> None:
        # The person sees a short page (templates/socialaccount/); the cause is for the log.
        # The exception's type and text only: allauth's carry no token or client secret.
        log.warning(
            "single sign-on failed (%s): %s",
            error,
            f"{type(exception).__name__}: {exception}" if exception else "no exception",
            extra={"security_event": "sso_error"},
        )
        super().on_authentication_error(request, provider, error, exception, extra_context)

    def pre_social_login(self, request: HttpRequest, sociallogin: SocialLogin) -> None:
        if sociallogin.is_existing:
            refresh_roles(sociallogin.user, sociallogin)

    def save_user(self, request: HttpRequest, sociallogin: SocialLogin, form=None) -> User:
        user = super().save_user(request, sociallogin, form)
        refresh_roles(user, sociallogin)
        return user
