"""The JSON API (django-ninja; OpenAPI at /api/docs). Each app contributes a router.

Every endpoint needs a user: a browser session (with its CSRF token on unsafe methods) or a
per-user token (`Authorization: Bearer ao_…`). Handlers read the user from `request.auth`
and check the role themselves (`user.can_operate`, `user.can_approve`, ...).

Errors are JSON `{"detail": ...}`: 401 without a user, 403 for a missing role or CSRF token,
404, 409, 413 for oversized bodies, 422 with field errors for invalid input.
"""

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError
from ninja.security import HttpBearer, SessionAuth
from ninja.utils import check_csrf

from accounts.models import ApiToken
from approvals.api import router as approvals_router
from runs.api import router as runs_router


class TokenAuth(HttpBearer):
    def authenticate(self, request, token: str):
        user = ApiToken.authenticate(token)
        if user is not None:
            ApiToken.objects.filter(key_hash=ApiToken.hash(token)).update(
                last_used_at=timezone.now()
            )
            request.user = user
        return user


class SessionCsrfAuth(SessionAuth):
    """The browser session, with Django's CSRF check on unsafe methods.

    ninja's SessionAuth checks CSRF before it knows whether there is a user at all, so a
    request with no credentials got 403 "CSRF check Failed" instead of 401. Here CSRF is only
    checked once the session has a user: no user is 401, a user without the token is 403.
    """

    def __init__(self) -> None:
        # csrf=True also tells the Swagger page (/api/docs) to send the token.
        super().__init__(csrf=True)

    def _get_key(self, request: HttpRequest) -> str | None:
        return request.COOKIES.get(self.param_name)

    def authenticate(self, request: HttpRequest, key: str | None):
        if not request.user.is_authenticated:
            return None
        if not getattr(request, "_ninja_csrf_exempt", False) and check_csrf(request):
            raise HttpError(403, "CSRF check failed: send the X-CSRFToken header")
        return request.user


api = NinjaAPI(
    title="agentops",
    version="1",
    description="Launch, watch and cancel supervised agent runs. Authenticate with "
    "`Authorization: Bearer <token>` (`manage.py issue_token <username>`) or a session.",
    urls_namespace="api",
    auth=[TokenAuth(), SessionCsrfAuth()],
)
api.add_router("/", runs_router)
api.add_router("/approvals", approvals_router)


@api.exception_handler(AuthenticationError)
def _unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    response = api.create_response(
        request, {"detail": "authentication required: a session or a bearer token"}, status=401
    )
    response["WWW-Authenticate"] = 'Bearer realm="agentops"'
    return response


@api.exception_handler(RequestDataTooBig)
def _too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    return api.create_response(request, {"detail": "request body too large"}, status=413)
