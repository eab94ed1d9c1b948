"""Sign-in throttling with django-axes: which address a sign-in comes from, when a username is
locked, what a locked-out person is told, and the audit line every lockout leaves.
Why and how: docs/design/modules.md."""

import ipaddress
import logging
from collections.abc import Sequence

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_cool_off, get_failure_limit, get_lockout_parameters
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

log = logging.getLogger("agentops.security")
TEMPLATE = "registration/locked_out.html"
BY_ADDRESS = ("username", "ip_address")
BY_USERNAME = ("username",)


def client_address(request: HttpRequest) -> str | None:
    """AXES_CLIENT_IP_CALLABLE: the address a sign-in comes from.

    With no proxy declared (TRUSTED_PROXY_COUNT 0) it is the socket's, and X-Forwarded-For is
    ignored: the client wrote it. Behind N proxies, each appending the address it was reached
    from, the client's is the Nth entry from the right; entries to its left are the client's
    own words. A header with fewer entries than proxies was written by them all the same: its
    leftmost entry. No header (or an entry that is no address): the socket's."""
    remote = request.META.get("REMOTE_ADDR")
    count = settings.TRUSTED_PROXY_COUNT
    if count <= 0:
        return remote
    hops = [hop.strip() for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    hops = [hop for hop in hops if hop]
    if not hops:
        return remote
    chosen = hops[-count] if len(hops) >= count else hops[0]
    try:
        return str(ipaddress.ip_address(chosen))
    except ValueError:
        return remote


def refuse_forgeable_server_address(argv: Sequence[str]) -> None:
    """Raise ImproperlyConfigured when this process is a daphne started with --proxy-headers
    and no proxy is declared. daphne then takes each request's address from the left of
    X-Forwarded-For, which any client writes, so every guess could come from a new address;
    agentops reads the header itself, from the right, as far as TRUSTED_PROXY_COUNT says."""
    if "--proxy-headers" in argv and settings.TRUSTED_PROXY_COUNT <= 0:
        raise ImproperlyConfigured(
            "daphne --proxy-headers takes each request's address from X-Forwarded-For, which "
            "any client can write, and no proxy is declared: start daphne without "
            "--proxy-headers, and behind N reverse proxies set AXES_PROXY_COUNT=N"
        )


class SignInLockouts(AxesDatabaseHandler):
    """AXES_HANDLER: axes' database handler with the two locks above. Axes compares what
    `get_failures` answers with AXES_FAILURE_LIMIT: a username locked everywhere answers at
    least that."""

    def get_failures(self, request, credentials: dict | None = None) -> int:
        by_address, by_username = failures(self, request, credentials)
        if locked_everywhere(by_username):
            return max(by_address, get_failure_limit(request, credentials))
        return by_address


def failures(handler: AxesDatabaseHandler, request, credentials=None) -> tuple[int, int]:
    """Recent failures (within the cool-off) of this username from this address, and from
    anywhere."""
    found = dict.fromkeys((BY_ADDRESS, BY_USERNAME), 0)
    parameters = get_lockout_parameters(request, credentials)
    for parameter, attempts in zip(
        parameters, handler.get_user_attempts(request, credentials), strict=True
    ):
        key = (parameter,) if isinstance(parameter, str) else tuple(parameter)
        found[key] = attempts.aggregate(n=Sum("failures_since_start"))["n"] or 0
    return found[BY_ADDRESS], found[BY_USERNAME]


def locked_everywhere(by_username: int) -> bool:
    limit = settings.AXES_USERNAME_FAILURE_LIMIT
    return bool(limit) and by_username >= limit


def locked_out_response(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials=None
) -> HttpResponse:
    """AXES_LOCKOUT_CALLABLE: one clear page, 429, wherever the password was asked."""
    cool_off = get_cool_off(request)
    minutes = max(1, round(cool_off.total_seconds() / 60)) if cool_off else None
    _, by_username = failures(SignInLockouts(), request, credentials)
    context = {"minutes": minutes, "everywhere": locked_everywhere(by_username)}
    return render(request, TEMPLATE, context, status=429)


def on_locked_out(sender, request=None, username=None, ip_address=None, **kwargs) -> None:
    """axes.signals.user_locked_out: the audit line (Access failures in the admin keep each
    attempt, locked-out ones flagged)."""
    log.warning(
        "sign-in locked out: username %r from %s (path %s)",
        username,
        ip_address,
        getattr(request, "path", "?"),
        extra={"security_event": "lockout", "username": username, "ip_address": ip_address},
    )
