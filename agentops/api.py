"""The JSON API (django-ninja; OpenAPI at /api/docs). Each app contributes a router.

Every endpoint needs a user: a browser session (with its CSRF token on unsafe methods) or a
per-user token (`Authorization: Bearer ao_…`); see accounts/auth.py. Handlers read the user
from `request.auth`; an endpoint may require a role up front (`auth=api_auth("can_operate")`)
or check it itself (`user.can_approve`, ...).

Errors are JSON `{"detail": ...}`: 401 without a user, 403 for a missing role or CSRF token,
404, 409, 413 for oversized bodies, 422 with field errors for invalid input, 503 with
Retry-After while the database is unavailable.
"""

from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError

from accounts.auth import api_auth
from agentops.middleware import database_unavailable
from approvals.api import router as approvals_router
from approvals.grants.api import router as grants_router
from approvals.plans.api import router as plans_router
from gateway.api import router as gateway_router
from history.api import router as history_router
from runs.api import router as runs_router
from runs.budgets_api import router as budgets_router
from runs.compensation_api import router as compensation_router
from runs.pending_api import router as pending_router
from runs.steering_api import router as steering_router
from triggers.schedules_api import router as schedules_router
from triggers.webhooks import router as webhooks_router

api = NinjaAPI(
    title="agentops",
    version="1",
    description="Launch, watch and cancel supervised agent runs. Authenticate with "
    "`Authorization: Bearer <token>` (`manage.py issue_token <username>`) or a session.",
    urls_namespace="api",
    auth=api_auth(),
)
api.add_router("/", runs_router)
api.add_router("/", steering_router)
api.add_router("/", budgets_router)
api.add_router("/", compensation_router)
api.add_router("/approvals", approvals_router)
# /api/grants and /api/approvals/{id}/grant: standing grants.
api.add_router("/", grants_router)
# /api/runs/{id}/plans and /api/plans/{id}: plans approved once, and their decisions.
api.add_router("/", plans_router)
api.add_router("/", history_router)
api.add_router("/", schedules_router)
# POST /api/hooks/<agent>: authenticated by its signature, not by a user (auth=None there).
api.add_router("/", webhooks_router)
# POST /api/pending/<token>: a pending operation's callback, authenticated by its signed token.
api.add_router("/", pending_router)
# /api/external/...: agents that run elsewhere, authenticated by their own token.
api.add_router("/", gateway_router)


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


# Ninja answers unhandled errors itself when DEBUG is on (a 500 with the traceback), before
# DatabaseUnavailableMiddleware would see them: the same 503 in every mode.
api.add_exception_handler(OperationalError, database_unavailable)
api.add_exception_handler(InterfaceError, database_unavailable)
