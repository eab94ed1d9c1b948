"""The JSON API (django-ninja; OpenAPI at /api/docs). Each app contributes a router.

Every endpoint needs a user: a browser session (with its CSRF token on unsafe methods) or a
per-user token (`Authorization: Bearer ao_…`). Handlers read the user from `request.auth`
and check the role themselves (`user.can_operate`, `user.can_approve`, ...).
"""

from django.utils import timezone
from ninja import NinjaAPI
from ninja.security import HttpBearer, SessionAuth

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


api = NinjaAPI(
    title="agentops",
    version="1",
    urls_namespace="api",
    auth=[TokenAuth(), SessionAuth(csrf=True)],
)
api.add_router("/", runs_router)
api.add_router("/approvals", approvals_router)
