"""Sign-out (accounts/views.py): a POST with the CSRF token; for a session that came through a
provider offering RP-initiated logout (accounts/provider_logout.py), on to its end-session
endpoint with the ID token as hint; otherwise a sign-out here only. The sign-in side (what the
session keeps) runs against the local provider in tests/e2e/test_sso.py."""

from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.sessions.backends.base import SessionBase
from django.test import Client

from accounts import provider_logout

pytestmark = pytest.mark.django_db

ISSUER = "https://idp.example/realms/test"
ENDPOINT = ISSUER + "/protocol/openid-connect/logout"


@pytest.fixture(autouse=True)
def issuer(settings):
    settings.OIDC_ISSUER = ISSUER


def _signed_in(user, **kept) -> Client:
    client = Client()
    client.force_login(user)
    if kept:
        session = client.session
        assert provider_logout.remember(session, **kept)
        session.save()
    return client


def test_a_single_sign_on_session_signs_out_at_the_provider_too(operator, caplog):
    client = _signed_in(operator, endpoint=ENDPOINT, id_token="h.p.s", client_id="agentops")
    with caplog.at_level("INFO", logger="agentops.security"):
        response = client.post("/accounts/logout/")
    assert response.status_code == 302
    location = urlsplit(response["Location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == ENDPOINT
    assert parse_qs(location.query) == {
        "id_token_hint": ["h.p.s"],
        "client_id": ["agentops"],
        "post_logout_redirect_uri": ["http://testserver/accounts/login/"],
    }
    # Signed out here first: the session is gone whatever the provider does.
    assert client.get("/runs/").status_code == 302
    assert "_auth_user_id" not in client.session
    assert any("sent to the identity provider" in r.getMessage() for r in caplog.records)


def test_the_endpoint_s_own_query_is_kept(operator):
    policy = ENDPOINT + "?p=b2c_1_signin"
    client = _signed_in(operator, endpoint=policy, id_token="t", client_id="c")
    query = parse_qs(urlsplit(client.post("/accounts/logout/")["Location"]).query)
    assert query["p"] == ["b2c_1_signin"] and query["id_token_hint"] == ["t"]


def test_a_password_session_signs_out_here_only(operator):
    client = _signed_in(operator)
    response = client.post("/accounts/logout/")
    assert response.status_code == 302 and response["Location"] == "/accounts/login/"
    assert client.get("/runs/").status_code == 302


def test_sign_out_is_a_post_with_the_csrf_token(operator):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    assert client.get("/accounts/logout/").status_code == 405
    refused = client.post("/accounts/logout/")
    assert refused.status_code == 403 and b"CSRF" in refused.content
    assert client.get("/runs/").status_code == 200  # still signed in


@pytest.mark.parametrize(
    "endpoint",
    [
        "",
        "javascript:alert(1)",
        "//idp.example/logout",
        "ftp://idp.example/logout",
        # Another origin than the issuer's: the browser would refuse the redirect (CSP
        # form-action lets the issuer's origin alone through).
        "https://logout.elsewhere.example/end",
        "http://idp.example/realms/test/logout",
    ],
)
def test_only_an_http_endpoint_is_kept(endpoint):
    session = SessionBase()
    session[provider_logout.SESSION_KEY] = {"endpoint": ENDPOINT}  # a previous sign-in's
    assert not provider_logout.remember(session, endpoint=endpoint, id_token="t", client_id="c")
    assert provider_logout.SESSION_KEY not in session
