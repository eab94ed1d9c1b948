"""The requests views and API endpoints are given, typed as the middleware leaves them (for
the type checker): django-htmx's details, the signed-in user, django-ninja's `auth`."""

from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails

from .models import User


class HtmxRequest(HttpRequest):
    htmx: HtmxDetails


class SignedInRequest(HtmxRequest):
    """A view's request past login_required: its user is signed in."""

    user: User


class ApiRequest(HttpRequest):
    """An /api request past its authentication (agentops/api.py): `auth` is the user."""

    auth: User
