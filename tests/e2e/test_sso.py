"""Single sign-on in a real browser: agentops (`manage.py up`) signs people in through a local
OpenID Connect provider (tests/support/oidc_provider.py), their groups there become roles
here, and a group taken away at the provider takes the role away at the next sign-in, closing
the person's open sockets."""

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from playwright.sync_api import Page, WebSocket, expect

from tests.livesupport import UpServer, kill_up, start_up, stop_up
from tests.support.oidc_provider import OidcProvider

from .conftest import (
    LIVE_TIMEOUT_MS,
    PASSWORD,
    drop_postgres_database,
    fresh_postgres_database,
    redis_of_the_server,
    services_from_env,
)

pytestmark = pytest.mark.e2e
CLOSE_FORBIDDEN = 4403


@pytest.fixture(scope="module")
def provider() -> Iterator[OidcProvider]:
    idp = OidcProvider(client_id="agentops-test", client_secret="test-client-secret").start()
    yield idp
    idp.stop()


@contextmanager
def serving(tmp_path_factory, provider: OidcProvider, name: str, **env: str) -> Iterator[UpServer]:
    """`up` with single sign-on against `provider`, in this test session's topology (as the
    suite's own server: embedded, or Postgres + Redis with a database of its own)."""
    env = {
        "AGENTOPS_DEMO_PASSWORD": PASSWORD,
        "AGENTOPS_OIDC_ISSUER": provider.issuer,
        "AGENTOPS_OIDC_CLIENT_ID": provider.client_id,
        "AGENTOPS_OIDC_CLIENT_SECRET": provider.client_secret,
        "AGENTOPS_OIDC_PROVIDER_NAME": "Test IdP",
        **env,
    }
    args: list[str] = []
    database = ""
    services = services_from_env()
    if services:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "")
        database = fresh_postgres_database(services[0], f"_{name}{worker and '_' + worker}")
        env.update(DATABASE_URL=database, REDIS_URL=redis_of_the_server(services[1], 12))
        args.append("--with-worker")
    up = start_up(tmp_path_factory.mktemp(f"{name}-var"), *args, **env)
    try:
        yield up
        stop_up(up)
    finally:
        kill_up(up)
        if database:
            drop_postgres_database(database)


# Each server's own settings, beside the provider's.
SERVERS = {
    "sso": {
        "AGENTOPS_OIDC_ROLE_CLAIM": "groups",
        "AGENTOPS_OIDC_ROLES": "agentops-operators:operator,agentops-approvers:approver",
    },
    # Passwords turned off: single sign-on is the only way in.
    "sso_only": {
        "AGENTOPS_PASSWORD_LOGIN": "false",
        "AGENTOPS_OIDC_ROLES": "agentops-admins:admin",
    },
}


@pytest.fixture(scope="module")
def sso_server(tmp_path_factory, provider) -> Iterator[UpServer]:
    with serving(tmp_path_factory, provider, "sso", **SERVERS["sso"]) as up:
        yield up


@pytest.fixture(scope="module")
def sso_only_server(tmp_path_factory, provider) -> Iterator[UpServer]:
    with serving(tmp_path_factory, provider, "sso_only", **SERVERS["sso_only"]) as up:
        yield up


def through_the_provider(page: Page, server: UpServer, username: str, path: str) -> None:
    """From a page that needs a sign-in, through the provider's page, as `username`."""
    page.goto(server.url + path)
    page.wait_for_url(re.compile(re.escape("/accounts/login/?next=" + path) + "$"))
    page.get_by_role("button", name="Sign in with Test IdP").click()
    page.wait_for_url(re.compile(r"/realms/test/authorize\?"))
    page.fill("#username", username)
    page.get_by_role("button", name="Continue").click()


def sign_in_with_sso(page: Page, server: UpServer, username: str, path: str = "/runs/") -> None:
    through_the_provider(page, server, username, path)
    # Back where the person was going (allauth keeps `next` through the round trip).
    expect(page).to_have_url(server.url + path)


def test_a_provider_group_is_a_role_and_losing_it_ends_access(sso_server, provider, browser):
    provider.users["olivia"] = {"groups": ["agentops-operators", "unrelated-group"]}
    first = browser.new_context()
    page = first.new_page()
    sockets: list[WebSocket] = []
    page.on("websocket", lambda ws: sockets.append(ws))
    sign_in_with_sso(page, sso_server, "olivia")
    # An operator: the runs list, and the launch form that only operators get.
    expect(page.locator("h1")).to_contain_text("Runs")
    response = page.goto(sso_server.url + "/runs/new/")
    assert response is not None and response.status == 200
    expect(page.locator("#nav-pending-count")).to_have_text(re.compile(r"^\d+$"))
    live = [ws for ws in sockets if "/ws/approvals/" in ws.url and not ws.is_closed()]
    assert live, [ws.url for ws in sockets]
    closed: list[WebSocket] = []
    live[-1].on("close", lambda ws: closed.append(ws))

    # An administrator removes her from the group at the provider; she signs in again
    # elsewhere (a second browser): the role goes, and the first browser's socket closes.
    provider.users["olivia"]["groups"] = ["unrelated-group"]
    second = browser.new_context()
    again = second.new_page()
    through_the_provider(again, sso_server, "olivia", "/runs/")
    again.wait_for_url(sso_server.url + "/runs/")
    assert again.goto(sso_server.url + "/runs/").status == 403

    waited_ms = 0
    while not closed and waited_ms < LIVE_TIMEOUT_MS:
        page.wait_for_timeout(100)
        waited_ms += 100
    assert closed, "the first browser's socket stayed open after the role was removed"
    assert page.goto(sso_server.url + "/runs/").status == 403
    # Each change of roles leaves an audit line.
    assert "single sign-on changed roles of 'olivia': added none, removed ['operator']" in (
        sso_server.output
    )

    # Given back at the provider, the role returns at the next sign-in.
    provider.users["olivia"]["groups"] = ["agentops-approvers"]
    third = browser.new_context()
    page3 = third.new_page()
    sign_in_with_sso(page3, sso_server, "olivia", path="/approvals/")
    assert page3.goto(sso_server.url + "/approvals/").status == 200
    assert page3.goto(sso_server.url + "/runs/new/").status == 403  # approver, not operator
    for context in (first, second, third):
        context.close()


def test_local_passwords_still_work_beside_single_sign_on(sso_server, browser):
    context = browser.new_context()
    page = context.new_page()
    page.goto(sso_server.url + "/runs/")
    expect(page.get_by_role("button", name="Sign in with Test IdP")).to_be_visible()
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Sign in", exact=True).click()
    page.wait_for_url(f"{sso_server.url}/runs/")
    context.close()


def test_password_throttling_still_holds_beside_single_sign_on(sso_server, browser):
    context = browser.new_context()
    page = context.new_page()
    page.goto(sso_server.url + "/accounts/login/")
    token = next(c["value"] for c in context.cookies() if c["name"] == "csrftoken")

    def attempt(password: str) -> int:
        form = {"csrfmiddlewaretoken": token, "username": "approver", "password": password}
        return context.request.post(sso_server.url + "/accounts/login/", form=form).status

    # AXES_FAILURE_LIMIT (5) wrong passwords, then even the right one meets the lockout page.
    assert [attempt("wrong") for _ in range(5)][:4] == [200] * 4
    assert attempt(PASSWORD) == 429
    context.close()


def test_an_unknown_person_at_the_provider_gets_no_session(sso_server, provider, browser):
    context = browser.new_context()
    page = context.new_page()
    through_the_provider(page, sso_server, "mallory", "/runs/")
    # The provider answers access_denied; allauth shows it as a sign-in not completed.
    expect(page.get_by_role("alert")).to_contain_text("did not sign you in")
    assert page.get_by_role("link", name="Back to sign-in").get_attribute("href") == (
        "/accounts/login/"
    )
    assert "single sign-on failed (cancelled)" in sso_server.output
    assert page.goto(sso_server.url + "/runs/").url.startswith(sso_server.url + "/accounts/login/")
    context.close()


def test_with_passwords_off_only_single_sign_on_lets_anyone_in(sso_only_server, provider, browser):
    assert "password sign-in is off" in sso_only_server.output
    assert "password for all three" not in sso_only_server.output
    context = browser.new_context()
    page = context.new_page()
    page.goto(sso_only_server.url + "/runs/")
    expect(page.get_by_role("button", name="Sign in with Test IdP")).to_be_visible()
    expect(page.locator("#id_password")).to_have_count(0)
    # A password posted anyway (the demo admin's, which is right) is refused before a check.
    token = next(c["value"] for c in context.cookies() if c["name"] == "csrftoken")
    refused = context.request.post(
        sso_only_server.url + "/accounts/login/",
        form={"csrfmiddlewaretoken": token, "username": "admin", "password": PASSWORD},
    )
    assert refused.status == 403
    assert "Password sign-in is turned off" in refused.text()
    assert page.goto(sso_only_server.url + "/runs/").url.startswith(
        sso_only_server.url + "/accounts/login/"
    )
    # The admin's own password form is not offered either: it leads to the sign-in page.
    page.goto(sso_only_server.url + "/admin/")
    assert page.url == f"{sso_only_server.url}/accounts/login/?next=/admin/"

    provider.users["ingrid"] = {"groups": ["agentops-admins"]}
    sign_in_with_sso(page, sso_only_server, "ingrid")
    # Her session holds: the single sign-on backend loads it with ModelBackend gone.
    assert page.goto(sso_only_server.url + "/audit/").status == 200
    expect(page.locator("#nav-pending-count")).to_have_text(re.compile(r"^\d+$"))
    context.close()


def test_a_person_deactivated_here_stays_out_whatever_the_provider_says(
    sso_server, provider, browser
):
    provider.users["dora"] = {"groups": ["agentops-operators"]}
    context = browser.new_context()
    page = context.new_page()
    sign_in_with_sso(page, sso_server, "dora")
    context.clear_cookies()
    sso_server.manage(
        "from accounts.models import User; User.objects.filter(username='dora')"
        ".update(is_active=False)"
    )
    through_the_provider(page, sso_server, "dora", "/runs/")
    expect(page.get_by_role("alert")).to_contain_text("account is deactivated")
    assert page.goto(sso_server.url + "/runs/").url.startswith(sso_server.url + "/accounts/login/")
    context.close()


def test_a_provider_name_equal_to_a_local_account_does_not_take_it_over(
    sso_server, provider, browser
):
    """The demo's local `operator` holds the operator role; someone the provider calls
    `operator` (with no groups) gets an account of their own, and with it no role."""
    provider.users["operator"] = {"groups": []}
    context = browser.new_context()
    page = context.new_page()
    through_the_provider(page, sso_server, "operator", "/runs/")
    page.wait_for_url(sso_server.url + "/runs/")
    assert page.goto(sso_server.url + "/runs/").status == 403
    usernames = sso_server.manage(
        "from allauth.socialaccount.models import SocialAccount as S; "
        "print(S.objects.get(uid='sub-operator').user.username)"
    )
    assert usernames.strip() not in ("", "operator")
    context.close()


def sign_out(page: Page) -> None:
    page.get_by_role("button", name="Sign out").click()


def test_signing_out_ends_the_session_at_the_provider_too(sso_server, provider, browser):
    provider.users["paula"] = {"groups": ["agentops-operators"]}
    context = browser.new_context()
    page = context.new_page()
    sign_in_with_sso(page, sso_server, "paula")
    before = len(provider.logouts)
    sign_out(page)
    # Through the provider's end-session endpoint (RP-initiated logout) and back to sign-in.
    page.wait_for_url(sso_server.url + "/accounts/login/")
    assert provider.logouts[before:] == [
        {"sub": "sub-paula", "post_logout_redirect_uri": sso_server.url + "/accounts/login/"}
    ]
    assert "'paula' signed out, and is sent to the identity provider" in sso_server.output
    assert page.goto(sso_server.url + "/runs/").url.startswith(sso_server.url + "/accounts/login/")
    context.close()


def test_a_password_session_signs_out_here_only(sso_server, provider, browser):
    context = browser.new_context()
    page = context.new_page()
    page.goto(sso_server.url + "/accounts/login/?next=/runs/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Sign in", exact=True).click()
    page.wait_for_url(f"{sso_server.url}/runs/")
    before = len(provider.logouts)
    sign_out(page)
    page.wait_for_url(sso_server.url + "/accounts/login/")
    assert provider.logouts[before:] == []
    context.close()


def test_a_provider_without_an_end_session_endpoint_means_a_local_sign_out(
    sso_server, provider, browser
):
    provider.users["quinn"] = {"groups": ["agentops-operators"]}
    provider.offers_logout = False
    try:
        context = browser.new_context()
        page = context.new_page()
        sign_in_with_sso(page, sso_server, "quinn")
        before = len(provider.logouts)
        sign_out(page)
        page.wait_for_url(sso_server.url + "/accounts/login/")
        assert provider.logouts[before:] == []
        assert page.goto(sso_server.url + "/runs/").url.startswith(
            sso_server.url + "/accounts/login/"
        )
        context.close()
    finally:
        provider.offers_logout = True
