"""django-allauth's hooks for OpenID Connect sign-in (loaded only when AGENTOPS_OIDC_ISSUER is
set: settings name these adapters, and allauth is installed only then).

Roles and team memberships are refreshed from the provider's claims before the session is
granted, at every sign-in: for a known person in `pre_social_login`, for a new one once allauth
has saved them.
"""

import logging

from allauth.account.adapter import DefaultAccountAdapter
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from allauth.socialaccount.models import SocialLogin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from . import sso
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
