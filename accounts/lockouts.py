"""Sign-in throttling with django-axes: what a locked-out person is told, and the audit line
every lockout leaves.

Axes counts failures per (username, address) on every password check that goes through
`django.contrib.auth.authenticate`: the login page (where the admin's sign-in sends people),
and the one-tap page's password prompt (approvals/notify/one_tap/views.py). Settings: AXES_*
in agentops/settings.py.
"""

import logging

from axes.helpers import get_cool_off
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

log = logging.getLogger("agentops.security")
TEMPLATE = "registration/locked_out.html"


def locked_out_response(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials=None
) -> HttpResponse:
    """AXES_LOCKOUT_CALLABLE: one clear page, 429, wherever the password was asked."""
    cool_off = get_cool_off(request)
    minutes = max(1, round(cool_off.total_seconds() / 60)) if cool_off else None
    return render(request, TEMPLATE, {"minutes": minutes}, status=429)


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
