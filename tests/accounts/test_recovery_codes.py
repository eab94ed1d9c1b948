"""Recovery codes (accounts/recovery_codes.py, accounts/recovery_code_views.py) against the real
django-otp static device: made with the first second factor and shown once, each spent once
at the second step of a sign-in, regenerating replaces them, wrong ones are form errors that
count against the sign-in and are throttled, and the admin's reset of someone's factors."""

import pytest
from django.test import Client
from django_otp import DEVICE_ID_SESSION_KEY
from django_otp.plugins.otp_static.models import StaticDevice, StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from accounts import recovery_codes, two_factor
from tests.accounts.test_two_factor import code
from tests.conftest import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def olivia(django_user_model):
    return make_user(django_user_model, "olivia", "operator")


@pytest.fixture
def enrolled(olivia) -> TOTPDevice:
    return TOTPDevice.objects.create(user=olivia, name="app", confirmed=True)


@pytest.fixture
def codes(olivia, enrolled) -> list[str]:
    return recovery_codes.regenerate(olivia)


def sign_in(client: Client) -> None:
    response = client.post("/accounts/login/", {"username": "olivia", "password": "pw-olivia"})
    assert response["Location"] == "/accounts/two-factor/verify/"


def use(client: Client, typed: str):
    return client.post("/accounts/two-factor/verify/recovery-code/", {"recovery_code": typed})


def signed_in(client: Client) -> bool:
    return client.get("/runs/").status_code == 200


def unthrottle(user) -> None:
    StaticDevice.objects.filter(user=user).update(throttling_failure_timestamp=None)


def test_regenerate_makes_ten_distinct_codes_in_the_shown_form(olivia, enrolled):
    codes = recovery_codes.regenerate(olivia)
    assert len(set(codes)) == 10
    assert all(len(c) == 9 and c[4] == "-" for c in codes)
    assert recovery_codes.remaining(olivia) == 10


def test_the_first_factor_comes_with_codes_shown_once(olivia):
    client = Client()
    client.force_login(olivia)
    client.post("/accounts/two-factor/start/")
    device = TOTPDevice.objects.get(user=olivia)
    response = client.post("/accounts/two-factor/confirm/", {"code": code(device)})
    assert response["Location"] == "/accounts/two-factor/"
    page = client.get("/accounts/two-factor/")
    assert page["Cache-Control"].startswith("max-age=0")
    shown = [
        t for t in StaticToken.objects.filter(device__user=olivia).values_list("token", flat=True)
    ]
    assert len(shown) == 10
    html = page.content.decode()
    assert all(f"{t[:4]}-{t[4:]}" in html for t in shown)
    assert "10 of 10 recovery codes left" in html
    # Shown once: the next visit only counts them.
    again = client.get("/accounts/two-factor/").content.decode()
    assert not any(f"{t[:4]}-{t[4:]}" in again for t in shown)
    assert "10 of 10 recovery codes left" in again


def test_a_code_signs_in_once_and_is_recorded(olivia, codes, caplog):
    client = Client()
    sign_in(client)
    with caplog.at_level("INFO", logger="agentops.security"):
        # Typed upper case, without the dash: still the code.
        response = use(client, codes[3].replace("-", "").upper())
    assert response.status_code == 302 and response["Location"] == "/"
    assert signed_in(client)
    assert client.session[DEVICE_ID_SESSION_KEY] == recovery_codes.device(olivia).persistent_id
    assert recovery_codes.remaining(olivia) == 9
    used = [
        r for r in caplog.records if getattr(r, "security_event", "") == "mfa_recovery_code_used"
    ]
    assert len(used) == 1 and "9 left" in used[0].getMessage()
    assert "9 of 10 recovery codes left" in client.get("/accounts/two-factor/").content.decode()
    # The same code again, on another sign-in: refused.
    other = Client()
    sign_in(other)
    response = use(other, codes[3])
    assert response.status_code == 400 and b"not right (or was already used)" in response.content
    assert not signed_in(other)


def test_regenerating_invalidates_the_old_codes(olivia, codes, caplog):
    client = Client()
    client.force_login(olivia)
    with caplog.at_level("INFO", logger="agentops.security"):
        response = client.post("/accounts/two-factor/recovery-codes/")
    assert response["Location"] == "/accounts/two-factor/"
    assert any(
        getattr(r, "security_event", "") == "recovery_codes_regenerated" for r in caplog.records
    )
    new = client.session[recovery_codes.FRESH_KEY]
    assert set(new).isdisjoint(codes)
    page = client.get("/accounts/two-factor/").content.decode()
    assert all(c in page for c in new)
    signing = Client()
    sign_in(signing)
    assert use(signing, codes[0]).status_code == 400
    unthrottle(olivia)
    assert use(signing, new[0]).status_code == 302
    assert signed_in(signing)


def test_a_wrong_code_is_a_clear_form_error_and_counted(olivia, codes, caplog):
    client = Client()
    sign_in(client)
    with caplog.at_level("INFO", logger="agentops.security"):
        response = use(client, "aaaa-aaaa")
    assert response.status_code == 400
    assert b"That recovery code is not right" in response.content
    assert b'id="recovery-code" open' in response.content
    assert any(getattr(r, "security_event", "") == "mfa_failure" for r in caplog.records)
    assert client.session[two_factor.PENDING_KEY]["tries"] == 1
    assert recovery_codes.remaining(olivia) == 10
    assert not signed_in(client)


@pytest.mark.parametrize("bad", ["", "abc", "abcd-efgh-ijkl", "abcd-efg1", "١٢٣٤-٥٦٧٨", "x" * 5000])
def test_malformed_codes_are_form_errors_not_counted(olivia, codes, bad):
    client = Client()
    sign_in(client)
    response = use(client, bad)
    assert response.status_code == 400 and b"like abcd-efgh" in response.content
    assert client.session[two_factor.PENDING_KEY]["tries"] == 0


def test_wrong_codes_throttle_even_a_right_one(olivia, codes):
    client = Client()
    sign_in(client)
    use(client, "aaaa-aaaa")
    # The next try within the wait (1 s after one failure) is refused unchecked.
    response = use(client, codes[0])
    assert response.status_code == 400 and b"Too many wrong codes" in response.content
    assert recovery_codes.remaining(olivia) == 10
    unthrottle(olivia)
    assert use(client, codes[0]).status_code == 302


def test_five_failures_end_the_waiting_sign_in(olivia, codes):
    client = Client()
    sign_in(client)
    for _ in range(two_factor.MAX_TRIES):
        unthrottle(olivia)
        response = use(client, "aaaa-aaaa")
    assert response["Location"] == "/accounts/login/"
    unthrottle(olivia)
    assert use(client, codes[0])["Location"] == "/accounts/login/"
    assert not signed_in(client) and recovery_codes.remaining(olivia) == 10


def test_a_code_cannot_skip_the_password(olivia, codes):
    client = Client()
    assert use(client, codes[0])["Location"] == "/accounts/login/"
    assert recovery_codes.remaining(olivia) == 10


def test_codes_alone_are_not_a_second_factor(olivia, codes):
    # Someone whose app was removed but whose codes remain: the password is enough again, and
    # they cannot make new codes before setting up a factor.
    TOTPDevice.objects.filter(user=olivia).delete()
    assert not two_factor.has_second_factor(olivia)
    client = Client()
    assert (
        client.post("/accounts/login/", {"username": "olivia", "password": "pw-olivia"})["Location"]
        == "/"
    )
    client.post("/accounts/two-factor/recovery-codes/")
    assert recovery_codes.remaining(olivia) == 10
    assert recovery_codes.FRESH_KEY not in client.session


def test_regenerating_needs_sign_in_and_post(olivia, codes):
    assert (
        Client()
        .post("/accounts/two-factor/recovery-codes/")["Location"]
        .startswith("/accounts/login/")
    )
    client = Client()
    client.force_login(olivia)
    assert client.get("/accounts/two-factor/recovery-codes/").status_code == 405
    csrf = Client(enforce_csrf_checks=True)
    csrf.force_login(olivia)
    assert csrf.post("/accounts/two-factor/recovery-codes/").status_code == 403
    assert StaticToken.objects.filter(token=codes[0].replace("-", "")).exists()


def test_an_admin_resets_someones_second_factors_on_record(olivia, codes, admin_user, caplog):
    from django.contrib.admin.models import LogEntry

    from accounts.models import WebAuthnCredential

    WebAuthnCredential.objects.create(
        user=olivia, name="key", credential_id="abc", public_key=b"k", confirmed=True
    )
    admin_user.is_staff = admin_user.is_superuser = True
    admin_user.save()
    client = Client()
    client.force_login(admin_user)
    with caplog.at_level("INFO", logger="agentops.security"):
        response = client.post(
            "/admin/accounts/user/",
            {"action": "reset_two_factor", "_selected_action": [olivia.pk]},
        )
    assert response.status_code == 302
    assert not two_factor.has_second_factor(olivia)
    assert recovery_codes.device(olivia) is None
    assert not WebAuthnCredential.objects.filter(user=olivia).exists()
    reset = [r for r in caplog.records if getattr(r, "security_event", "") == "mfa_reset"]
    assert len(reset) == 1 and "by ada" in reset[0].getMessage()
    entry = LogEntry.objects.get(object_id=str(olivia.pk))
    assert entry.user == admin_user and "Reset two-factor" in entry.get_change_message()
    # The password alone signs her in again.
    assert (
        Client().post("/accounts/login/", {"username": "olivia", "password": "pw-olivia"})[
            "Location"
        ]
        == "/"
    )
