"""Sign-in throttling (django-axes): the login page (the admin's sign-in is it) locks a
username out from an address after AXES_FAILURE_LIMIT failures, says so clearly, audits it,
and an admin unlocks."""

import pytest
from axes.models import AccessAttempt, AccessFailureLog
from django.test import Client

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
