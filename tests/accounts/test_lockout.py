"""Sign-in throttling (django-axes, accounts/lockouts.py): the login page (the admin's sign-in
is it) locks a username out from an address after AXES_FAILURE_LIMIT failures and from
everywhere after AXES_USERNAME_FAILURE_LIMIT, says so clearly, audits it, and an admin
unlocks. The address is never one the client wrote in X-Forwarded-For, behind 0, 1 or 2
declared proxies."""

import pytest
from axes.models import AccessAttempt, AccessFailureLog
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from accounts import lockouts
from tests.conftest import make_user

pytestmark = pytest.mark.django_db

LIMIT = 5


@pytest.fixture
def arthur(django_user_model):
    return make_user(django_user_model, "arthur", "approver")


def sign_in(client: Client, password: str, *, path: str = "/accounts/login/", **extra):
    return client.post(path, {"username": "arthur", "password": password}, **extra)


def fail_until_locked(client: Client, path: str = "/accounts/login/", **extra) -> list[int]:
    return [sign_in(client, "guess", path=path, **extra).status_code for _ in range(LIMIT)]


def test_the_login_page_locks_out_after_the_limit(arthur, caplog):
    client = Client()
    assert fail_until_locked(client) == [200] * (LIMIT - 1) + [429]
    response = sign_in(client, "pw-arthur")
    # Even the right password: refused, not checked, not signed in.
    assert response.status_code == 429
    page = response.content.decode()
    assert "Too many failed sign-ins for this account from your address" in page
    assert "Try again in 15 minutes" in page and "administrator" in page
    assert "_auth_user_id" not in client.session
    # Audited: a log line and the failures, locked-out ones flagged (admin: Access failures).
    assert any("sign-in locked out: username 'arthur'" in r.getMessage() for r in caplog.records)
    assert AccessFailureLog.objects.filter(username="arthur", locked_out=True).exists()


def test_the_lockout_is_per_username_and_address(arthur, django_user_model):
    make_user(django_user_model, "bea", "approver")
    fail_until_locked(Client())
    # Another person at the same address, and the same person elsewhere, still sign in.
    assert (
        Client().post("/accounts/login/", {"username": "bea", "password": "pw-bea"}).status_code
        == 302
    )
    assert sign_in(Client(REMOTE_ADDR="10.9.8.7"), "pw-arthur").status_code == 302


def test_a_forged_forwarded_for_header_is_no_new_address(arthur):
    client = Client()
    for n in range(LIMIT):
        sign_in(client, "guess", HTTP_X_FORWARDED_FOR=f"203.0.113.{n}")
    response = sign_in(client, "pw-arthur", HTTP_X_FORWARDED_FOR="203.0.113.99")
    assert response.status_code == 429


def test_the_admin_login_goes_through_the_sign_in_page(arthur):
    # The admin's own password form would skip the two-factor step: it is not served; the
    # sign-in page, which locks out, is where a password is checked.
    response = Client().get("/admin/login/?next=/admin/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/admin/"
    response = sign_in(Client(), "guess", path="/admin/login/")
    assert response.status_code == 302 and not AccessAttempt.objects.exists()


def test_an_admin_unlocks_from_the_users_list(arthur, admin_user):
    fail_until_locked(Client())
    assert AccessAttempt.objects.filter(username="arthur").exists()
    admin = Client()
    admin.force_login(admin_user)
    admin_user.is_staff = admin_user.is_superuser = True
    admin_user.save()
    response = admin.post(
        "/admin/accounts/user/",
        {"action": "unlock_sign_in", "_selected_action": [arthur.pk]},
        follow=True,
    )
    assert response.status_code == 200
    assert "Unlocked 1 account" in response.content.decode()
    assert not AccessAttempt.objects.filter(username="arthur").exists()
    assert sign_in(Client(), "pw-arthur").status_code == 302


# Where a sign-in comes from: the socket, or what the declared proxies saw; never the client's
# own X-Forwarded-For. The client is at 198.51.100.7; its proxies (when there are any) at
# 10.0.0.2 (outermost) and 10.0.0.3, each appending the address it was reached from.

CLIENT = "198.51.100.7"
FORGED = ["192.0.2.44", "192.0.2.45, 10.0.0.1"]


def through(proxies: int, forged: str | None = None, client: str = CLIENT) -> dict:
    """The request's META as the web process gets it behind `proxies` proxies, when the client
    sent `forged` as its own X-Forwarded-For (None: no header)."""
    hops = [forged] if forged else []
    if proxies == 0:
        return {"REMOTE_ADDR": client, **({"HTTP_X_FORWARDED_FOR": forged} if forged else {})}
    hops.append(client)
    if proxies == 2:
        hops.append("10.0.0.2")
    return {"REMOTE_ADDR": f"10.0.0.{proxies + 1}", "HTTP_X_FORWARDED_FOR": ", ".join(hops)}


@pytest.mark.parametrize("proxies", [0, 1, 2])
def test_a_locked_account_stays_locked_whatever_the_forwarded_for_header(arthur, settings, proxies):
    settings.TRUSTED_PROXY_COUNT = proxies
    client = Client()
    assert fail_until_locked(client, **through(proxies)) == [200] * (LIMIT - 1) + [429]
    for forged in [*FORGED, None]:
        response = sign_in(client, "pw-arthur", **through(proxies, forged))
        assert response.status_code == 429, (forged, response.status_code)
        assert "_auth_user_id" not in client.session
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {CLIENT}
    # Another person's address, seen the same way, is not locked.
    assert (
        sign_in(Client(), "pw-arthur", **through(proxies, client="203.0.113.9")).status_code == 302
    )


@pytest.mark.parametrize("proxies", [0, 1, 2])
def test_guesses_each_from_a_new_forged_address_are_counted_as_one_client(
    arthur, settings, proxies
):
    settings.TRUSTED_PROXY_COUNT = proxies
    client = Client()
    codes = [
        sign_in(client, "guess", **through(proxies, f"192.0.2.{n}, 10.0.0.1")).status_code
        for n in range(12)
    ]
    assert codes == [200] * (LIMIT - 1) + [429] * (12 - LIMIT + 1)
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {CLIENT}


@pytest.mark.parametrize(
    ("proxies", "meta", "seen"),
    [
        # A header with fewer entries than proxies: all of them the proxies' own words.
        (2, {"REMOTE_ADDR": "10.0.0.3", "HTTP_X_FORWARDED_FOR": CLIENT}, CLIENT),
        # Reached without the proxy (no header), or a proxy that wrote no address: the socket.
        (1, {"REMOTE_ADDR": "10.0.0.2"}, "10.0.0.2"),
        (1, {"REMOTE_ADDR": "10.0.0.2", "HTTP_X_FORWARDED_FOR": "1.2.3.4, unknown"}, "10.0.0.2"),
        (1, {"REMOTE_ADDR": "10.0.0.2", "HTTP_X_FORWARDED_FOR": " ,2001:DB8::1 "}, "2001:db8::1"),
    ],
)
def test_the_address_read_from_an_odd_header(settings, rf, proxies, meta, seen):
    settings.TRUSTED_PROXY_COUNT = proxies
    assert lockouts.client_address(rf.post("/accounts/login/", **meta)) == seen


def test_a_username_is_locked_from_everywhere_after_its_own_limit(arthur, settings):
    # Guesses spread over many real addresses (fewer than the per-address limit from each)
    # still stop; the person is told the lock is not about their address.
    settings.AXES_USERNAME_FAILURE_LIMIT = 8
    codes = [
        sign_in(Client(), "guess", REMOTE_ADDR=f"198.51.100.{n}").status_code for n in range(10)
    ]
    assert codes == [200] * 7 + [429] * 3
    response = sign_in(Client(), "pw-arthur", REMOTE_ADDR="203.0.113.200")
    assert response.status_code == 429
    assert "Too many failed sign-ins for this account, from several addresses" in (
        response.content.decode()
    )


def test_below_the_username_limit_the_person_signs_in_and_the_count_starts_again(arthur, settings):
    settings.AXES_USERNAME_FAILURE_LIMIT = 8
    for n in range(7):
        sign_in(Client(), "guess", REMOTE_ADDR=f"198.51.100.{n}")
    assert sign_in(Client(), "pw-arthur", REMOTE_ADDR="203.0.113.200").status_code == 302
    assert not AccessAttempt.objects.exists()
    assert sign_in(Client(), "guess", REMOTE_ADDR="198.51.100.9").status_code == 200


def test_no_username_lock_when_its_limit_is_zero(arthur, settings):
    settings.AXES_USERNAME_FAILURE_LIMIT = 0
    for n in range(LIMIT + 2):
        assert sign_in(Client(), "guess", REMOTE_ADDR=f"198.51.100.{n}").status_code == 200


@pytest.mark.parametrize(
    ("argv", "proxies", "refused"),
    [
        (["daphne", "--proxy-headers", "agentops.asgi:application"], 0, True),
        (["daphne", "--proxy-headers", "agentops.asgi:application"], 1, False),
        (["daphne", "-b", "0.0.0.0", "agentops.asgi:application"], 0, False),
    ],
)
def test_daphne_may_believe_forwarded_for_only_behind_declared_proxies(
    settings, argv, proxies, refused
):
    settings.TRUSTED_PROXY_COUNT = proxies
    if refused:
        with pytest.raises(ImproperlyConfigured, match="start daphne without --proxy-headers"):
            lockouts.refuse_forgeable_server_address(argv)
    else:
        lockouts.refuse_forgeable_server_address(argv)
