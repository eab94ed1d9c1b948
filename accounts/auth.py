"""Who is calling the API: a per-user bearer token or the browser session (with CSRF).

Both can also require a role (`require="can_operate"`): a caller who is known but lacks it
gets 403 before the request body is even parsed, so a viewer's launch is refused the same
way whatever it sends.
"""

import logging

from django.http import HttpRequest
from ninja.errors import HttpError
from ninja.security import HttpBearer, SessionAuth
from ninja.utils import check_csrf

from .models import ApiToken, Role, User

log = logging.getLogger("agentops.security")

ROLE_OF = {
    "can_view": Role.VIEWER,
    "can_operate": Role.OPERATOR,
    "can_approve": Role.APPROVER,
    "is_admin": Role.ADMIN,
}


def require_role(user: User | None, require: str | None) -> User | None:
    if user is not None and require and not getattr(user, require):
        raise HttpError(403, f"your account lacks the {ROLE_OF[require]} role")
    return user


class TokenAuth(HttpBearer):
    """`Authorization: Bearer ao_…` (see `manage.py issue_token`)."""

    def __init__(self, *, require: str | None = None) -> None:
        self.require = require
        super().__init__()

    def authenticate(self, request: HttpRequest, token: str) -> User | None:
        user = ApiToken.authenticate(token)
        if user is None:
            log.warning(
                "API token refused (%s…) on %s",
                token[:8],
                request.path,
                extra={"security_event": "token_refused", "token_prefix": token[:8]},
            )
            return None
        request.user = user
        name = getattr(user, "api_token_name", "")  # set by ApiToken.authenticate
        log.info(
            "API token %r of %r used on %s %s",
            name,
            user.get_username(),
            request.method,
            request.path,
            extra={
                "security_event": "token_used",
                "username": user.get_username(),
                "token_name": name,
            },
        )
        return require_role(user, self.require)


class SessionCsrfAuth(SessionAuth):
    """The browser session, with Django's CSRF check on unsafe methods.

    ninja's SessionAuth checks CSRF before it knows whether there is a user at all, so a
    request with no credentials got 403 "CSRF check Failed" instead of 401. Here CSRF is only
    checked once the session has a user: no user is 401, a user without the token is 403.
    """

    def __init__(self, *, require: str | None = None) -> None:
        self.require = require
        # csrf=True also tells the Swagger page (/api/docs) to send the token.
        super().__init__(csrf=True)

    def _get_key(self, request: HttpRequest) -> str | None:
        return request.COOKIES.get(self.param_name)

    def authenticate(self, request: HttpRequest, key: str | None) -> User | None:
        if not request.user.is_authenticated:
            return None
        if not getattr(request, "_ninja_csrf_exempt", False) and check_csrf(request):
            raise HttpError(403, "CSRF check failed: send the X-CSRFToken header")
        return require_role(request.user, self.require)


def api_auth(require: str | None = None) -> list:
    """The authenticators for an endpoint, optionally requiring a role (a User property)."""
    if require is not None and require not in ROLE_OF:
        raise ValueError(f"unknown role check {require!r}")
    return [TokenAuth(require=require), SessionCsrfAuth(require=require)]
