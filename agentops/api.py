"""The JSON API (django-ninja; OpenAPI at /api/docs). Each app contributes a router."""

from ninja import NinjaAPI

from approvals.api import router as approvals_router
from runs.api import router as runs_router

api = NinjaAPI(title="agentops", version="1", urls_namespace="api")
api.add_router("/", runs_router)
api.add_router("/approvals", approvals_router)
