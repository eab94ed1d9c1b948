"""Security events Django's auth signals tell of: each sign-in and each failed sign-in, as a
line of the `agentops.security` log with `security_event` and the fields a shipper filters
on (the JSON formatter writes `extra=` fields as keys of their own, agentkit/logs.py).

The other events are logged where they happen: lockouts (lockouts.py), SSO role and team
changes (oidc.py), token use (auth.py), two-factor and security keys, approval decisions
(approvals/decisions.py).
"""

import logging
from typing import Any

from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.http import HttpRequest

from .lockouts import client_address

log = logging.getLogger("agentops.security")


def _address(request: HttpRequest | None) -> str | None:
    # As the lockout counts it (behind declared proxies, the forwarded address).
    return client_address(request) if request is not None else None


def on_signed_in(sender: Any, request: HttpRequest | None = None, user: Any = None, **_: Any):
    username = user.get_username()
    method = getattr(user, "backend", "") or ""
    log.info(
        "signed in: %r from %s",
        username,
        _address(request),
        extra={
            "security_event": "signin",
            "username": username,
            "ip_address": _address(request),
            "backend": method,
        },
    )


def on_sign_in_failed(
    sender: Any, credentials: dict | None = None, request: HttpRequest | None = None, **_: Any
):
    # Django has already masked the password in `credentials`.
    username = (credentials or {}).get("username")
    log.warning(
        "sign-in failed: username %r from %s",
        username,
        _address(request),
        extra={
            "security_event": "signin_failed",
            "username": username,
            "ip_address": _address(request),
            "path": getattr(request, "path", None),
        },
    )


def connect() -> None:
    user_logged_in.connect(on_signed_in, dispatch_uid="accounts.security_events.signin")
    user_login_failed.connect(on_sign_in_failed, dispatch_uid="accounts.security_events.failed")
