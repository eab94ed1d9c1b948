"""Signing out of the identity provider too (OpenID Connect RP-Initiated Logout 1.0).
No allauth import: the sign-out view loads this with single sign-on off too.
Why and how: docs/design/modules.md."""

import logging
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from django.conf import settings
from django.http import HttpRequest

SESSION_KEY = "agentops_provider_logout"
log = logging.getLogger("agentops.security")


def _origin(url: str) -> str:
    parts = urlsplit(url or "")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return ""
    return f"{parts.scheme}://{parts.netloc}".lower()


def remember(session, *, endpoint: str, id_token: str, client_id: str) -> bool:
    """Keep what sign-out needs in the new session; False (nothing kept) when the provider
    offers no usable endpoint."""
    origin = _origin(endpoint)
    if origin and origin != _origin(settings.OIDC_ISSUER):
        log.warning(
            "the identity provider's end_session_endpoint %r is not on the issuer's origin: "
            "sign-out ends the session here only",
            endpoint[:200],
            extra={"security_event": "sso_logout_endpoint"},
        )
        origin = ""
    if not origin:
        session.pop(SESSION_KEY, None)
        return False
    session[SESSION_KEY] = {"endpoint": endpoint, "id_token": id_token, "client_id": client_id}
    return True


def end_session_url(request: HttpRequest) -> str:
    """Where the browser goes after signing out here: the provider's end-session endpoint
    with the logout parameters, or "" for a sign-out here only. Read it before the session
    is flushed."""
    kept = request.session.get(SESSION_KEY)
    if not isinstance(kept, dict) or not kept.get("endpoint"):
        return ""
    endpoint = urlsplit(kept["endpoint"])
    if endpoint.scheme not in ("http", "https") or not endpoint.netloc:
        return ""
    back = settings.LOGOUT_REDIRECT_URL or settings.LOGIN_URL
    params = {"post_logout_redirect_uri": request.build_absolute_uri(back)}
    if kept.get("id_token"):
        params["id_token_hint"] = kept["id_token"]
    if kept.get("client_id"):
        params["client_id"] = kept["client_id"]
    # The endpoint's own query (an Azure AD B2C policy, say) stays.
    query = urlencode([*parse_qsl(endpoint.query, keep_blank_values=True), *params.items()])
    return urlunsplit(endpoint._replace(query=query, fragment=""))
