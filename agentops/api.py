"""The JSON API (django-ninja; OpenAPI at /api/docs). Each app contributes a router.
Why and how: docs/design/modules.md."""

import pydantic
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError

from accounts.auth import api_auth
from agentops import idempotency, problems
from agentops.middleware import database_unavailable
from approvals.api import router as approvals_router
from approvals.grants.api import router as grants_router
from approvals.plans.api import router as plans_router
from gateway.api import router as gateway_router
from history.api import router as history_router
from runs.api import router as runs_router
from runs.budgets.api import router as budgets_router
from runs.compensation.api import router as compensation_router
from runs.pending.api import router as pending_router
from runs.steering.api import router as steering_router
from triggers.schedules_api import router as schedules_router
from triggers.webhooks import router as webhooks_router


class AgentopsAPI(NinjaAPI):
    def get_openapi_schema(self, **kwargs):
        return problems.document(idempotency.document(super().get_openapi_schema(**kwargs)))


api = AgentopsAPI(
    title="agentops",
    version="1",
    description="Launch, watch and cancel supervised agent runs. Authenticate with "
    "`Authorization: Bearer <token>` (`manage.py issue_token <username>`) or a session.",
    urls_namespace="api",
    auth=api_auth(),
)
# Before the routers: their operations inherit the decorators when the API is built.
idempotency.install(api)
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


# A response is validated from the model's attributes, some read from the database as they are
# asked for (a foreign key, a resolver's query): the database failing then reaches here wrapped
# by pydantic as a `get_attribute_error` naming the error's class (it keeps no reference to the
# exception). The chaos bench met it: a launch's answer read its `launched_by` as Postgres
# restarted, a 500. Still the database: the same 503.
DATABASE_ERROR_NAMES = ("OperationalError", "InterfaceError")


@api.exception_handler(pydantic.ValidationError)
def _response_unreadable(request: HttpRequest, exc: pydantic.ValidationError) -> HttpResponse:
    if any(
        error["type"] == "get_attribute_error"
        and str(error.get("ctx", {}).get("error", "")).startswith(DATABASE_ERROR_NAMES)
        for error in exc.errors(include_url=False)
    ):
        return database_unavailable(request, exc)
    raise exc  # a bug: Django's 500, as before
