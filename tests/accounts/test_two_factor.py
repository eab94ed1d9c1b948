"""Two-factor sign-in (accounts/two_factor.py, accounts/two_factor_views.py) against the real
django-otp: enrolment, the code step after the password, throttling, the waiting sign-in's
expiry, the AGENTOPS_MFA_REQUIRED policy, and single sign-on sessions left alone."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from django_otp import DEVICE_ID_SESSION_KEY
from django_otp.oath import totp
from django_otp.plugins.otp_totp.models import TOTPDevice

from accounts import two_factor
from tests.conftest import make_user

pytestmark = pytest.mark.django_db

SSO_BACKEND = "accounts.sso.SsoBackend"


def code(device: TOTPDevice) -> str:
    device.refresh_from_db()
    return f"{totp(device.bin_key, device.step, device.t0, device.digits, device.drift):06d}"


def wrong(device: TOTPDevice) -> str:
    return f"{(int(code(device)) + 1) % 1_000_000:06d}"


def allow_reuse(device: TOTPDevice) -> None:
    """django-otp refuses a code of a time step already used; tests sign in several times
    within one step."""
    TOTPDevice.objects.filter(pk=device.pk).update(last_t=-1)


@pytest.fixture
def olivia(django_user_model):
    return make_user(django_user_model, "olivia", "operator")


@pytest.fixture
def enrolled(olivia) -> TOTPDevice:
    device = TOTPDevice.objects.create(user=olivia, name="app", confirmed=True)
    return device


def sign_in(client: Client, password: str = "pw-olivia", **data):
    return client.post("/accounts/login/", {"username": "olivia", "password": password, **data})


def signed_in(client: Client) -> bool:
    return client.get("/runs/").status_code == 200


# Enrolment.


def test_a_person_enrols_with_the_key_and_a_current_code(olivia):
    client = Client()
    client.force_login(olivia)
    assert b"Off: a password alone" in client.get("/accounts/two-factor/").content
    page = client.post("/accounts/two-factor/start/").content.decode()
    device = TOTPDevice.objects.get(user=olivia)
    assert not device.confirmed
    from base64 import b32encode

    assert b32encode(device.bin_key).decode() in page
    assert "otpauth://totp/agentops%3Aolivia?secret=" in page
    # A wrong code confirms nothing.
    response = client.post("/accounts/two-factor/confirm/", {"code": wrong(device)})
    assert response.status_code == 400 and b"not right" in response.content
    device.refresh_from_db()
    assert not device.confirmed
    TOTPDevice.objects.filter(pk=device.pk).update(throttling_failure_timestamp=None)
    response = client.post("/accounts/two-factor/confirm/", {"code": code(device)})
    assert response.status_code == 302
    device.refresh_from_db()
    assert device.confirmed
    # This session counts as verified with it (django_otp.login).
    assert client.session[DEVICE_ID_SESSION_KEY] == device.persistent_id


def test_starting_again_replaces_an_unconfirmed_key(olivia):
    client = Client()
    client.force_login(olivia)
    client.post("/accounts/two-factor/start/")
    first = TOTPDevice.objects.get(user=olivia).key
    client.post("/accounts/two-factor/start/")
    assert list(TOTPDevice.objects.filter(user=olivia).values_list("key", flat=True)) != [first]
    assert TOTPDevice.objects.filter(user=olivia).count() == 1


def test_removing_needs_a_current_code(olivia, enrolled, caplog):
    client = Client()
    client.force_login(olivia)
    response = client.post("/accounts/two-factor/remove/", {"code": wrong(enrolled)})
    assert response.status_code == 400
    assert TOTPDevice.objects.filter(pk=enrolled.pk).exists()
    TOTPDevice.objects.filter(pk=enrolled.pk).update(throttling_failure_timestamp=None)
    with caplog.at_level("INFO", logger="agentops.security"):
        response = client.post("/accounts/two-factor/remove/", {"code": code(enrolled)})
    assert response.status_code == 302
    assert not TOTPDevice.objects.filter(user=olivia).exists()
    assert any(getattr(r, "security_event", "") == "mfa_removed" for r in caplog.records)


def test_the_enrolment_pages_refuse_get_and_need_sign_in(olivia):
    for path in ("start", "confirm", "remove"):
        response = Client().post(f"/accounts/two-factor/{path}/")
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
        client = Client()
        client.force_login(olivia)
        assert client.get(f"/accounts/two-factor/{path}/").status_code == 405


# Sign-in.


def test_a_password_alone_signs_in_without_a_device(olivia):
    client = Client()
    assert sign_in(client).status_code == 302
    assert signed_in(client)


def test_the_password_is_not_enough_with_a_device(enrolled, caplog):
    client = Client()
    with caplog.at_level("INFO", logger="agentops.security"):
        response = sign_in(client, next="/approvals/")
    assert response["Location"] == "/accounts/two-factor/verify/"
    assert not signed_in(client)
    page = client.get("/accounts/two-factor/verify/")
    assert page.status_code == 200 and b"authenticator app" in page.content
    response = client.post("/accounts/two-factor/verify/", {"code": code(enrolled)})
    assert response.status_code == 302 and response["Location"] == "/approvals/"
    assert signed_in(client)
    assert client.session[DEVICE_ID_SESSION_KEY] == enrolled.persistent_id
    assert two_factor.PENDING_KEY not in client.session
    events = {getattr(r, "security_event", "") for r in caplog.records}
    assert {"mfa_challenge", "mfa_verified"} <= events


def test_a_wrong_password_never_reaches_the_code_step(enrolled):
    client = Client()
    assert sign_in(client, "guess").status_code == 200
    assert client.get("/accounts/two-factor/verify/")["Location"] == "/accounts/login/"


def test_a_wrong_code_is_a_form_error(enrolled, caplog):
    client = Client()
    sign_in(client)
    with caplog.at_level("INFO", logger="agentops.security"):
        response = client.post("/accounts/two-factor/verify/", {"code": wrong(enrolled)})
    assert response.status_code == 400 and b"not right" in response.content
    assert not signed_in(client)
    assert any(getattr(r, "security_event", "") == "mfa_failure" for r in caplog.records)


def test_a_used_code_is_refused_the_second_time(enrolled):
    first = Client()
    sign_in(first)
    used = code(enrolled)
    assert first.post("/accounts/two-factor/verify/", {"code": used}).status_code == 302
    second = Client()
    sign_in(second)
    assert second.post("/accounts/two-factor/verify/", {"code": used}).status_code == 400
    assert not signed_in(second)


def test_repeated_wrong_codes_are_throttled_even_the_right_one(enrolled):
    client = Client()
    sign_in(client)
    client.post("/accounts/two-factor/verify/", {"code": wrong(enrolled)})
    # A second wrong code once the first wait (1 s) is over: the wait doubles.
    TOTPDevice.objects.filter(pk=enrolled.pk).update(
        throttling_failure_timestamp=timezone.now() - timedelta(seconds=1.5)
    )
    client.post("/accounts/two-factor/verify/", {"code": wrong(enrolled)})
    enrolled.refresh_from_db()
    assert enrolled.throttling_failure_count == 2
    response = client.post("/accounts/two-factor/verify/", {"code": code(enrolled)})
    assert response.status_code == 400 and b"Too many wrong codes" in response.content
    assert not signed_in(client)
    # Once the wait is over, the right code goes through.
    TOTPDevice.objects.filter(pk=enrolled.pk).update(
        throttling_failure_timestamp=timezone.now() - timedelta(seconds=3)
    )
    assert client.post("/accounts/two-factor/verify/", {"code": code(enrolled)}).status_code == 302
    assert signed_in(client)


def test_a_waiting_sign_in_gives_up_after_five_wrong_codes(enrolled):
    client = Client()
    sign_in(client)
    for n in range(two_factor.MAX_TRIES):
        TOTPDevice.objects.filter(pk=enrolled.pk).update(throttling_failure_timestamp=None)
        response = client.post("/accounts/two-factor/verify/", {"code": wrong(enrolled)})
    assert response.status_code == 302 and response["Location"] == "/accounts/login/"
    TOTPDevice.objects.filter(pk=enrolled.pk).update(throttling_failure_timestamp=None)
    response = client.post("/accounts/two-factor/verify/", {"code": code(enrolled)})
    assert response["Location"] == "/accounts/login/"
    assert not signed_in(client)


def test_the_waiting_sign_in_expires(enrolled, monkeypatch):
    client = Client()
    sign_in(client)
    later = two_factor.time.time() + 301
    monkeypatch.setattr(two_factor.time, "time", lambda: later)
    response = client.post("/accounts/two-factor/verify/", {"code": code(enrolled)})
    assert response.status_code == 302 and response["Location"] == "/accounts/login/"
    assert not signed_in(client)
    assert two_factor.PENDING_KEY not in client.session


def test_a_password_change_meanwhile_ends_the_waiting_sign_in(olivia, enrolled):
    client = Client()
    sign_in(client)
    olivia.set_password("new-one")
    olivia.save()
    response = client.post("/accounts/two-factor/verify/", {"code": code(enrolled)})
    assert response["Location"] == "/accounts/login/" and not signed_in(client)


def test_the_code_step_cannot_skip_the_password(olivia, enrolled, django_user_model):
    # No waiting sign-in: a right code alone, with whatever user id, signs nobody in.
    client = Client()
    response = client.post(
        "/accounts/two-factor/verify/", {"code": code(enrolled), "user_id": olivia.pk}
    )
    assert response["Location"] == "/accounts/login/" and not signed_in(client)
    # Someone else's password then olivia's code: still signs in only that someone else, and
    # only with their own code.
    make_user(django_user_model, "mallory", "operator")
    TOTPDevice.objects.create(user=django_user_model.objects.get(username="mallory"))
    mallory = TOTPDevice.objects.get(user__username="mallory")
    mallory.confirmed = True
    mallory.save()
    client.post("/accounts/login/", {"username": "mallory", "password": "pw-mallory"})
    response = client.post(
        "/accounts/two-factor/verify/", {"code": code(enrolled), "user_id": olivia.pk}
    )
    assert response.status_code == 400 and not signed_in(client)


def test_an_outside_next_is_dropped(enrolled):
    client = Client()
    sign_in(client, next="https://evil.example/")
    response = client.post("/accounts/two-factor/verify/", {"code": code(enrolled)})
    assert response.status_code == 302 and response["Location"] == "/"


@pytest.mark.parametrize(
    "bad", ["", "abc", "12345", "1234567", "١٢٣٤٥٦", "9" * 5000, "12 34 56", "\x00"]
)
def test_malformed_codes_are_form_errors(enrolled, olivia, bad):
    client = Client()
    sign_in(client)
    response = client.post("/accounts/two-factor/verify/", {"code": bad})
    # (A NUL is refused for every request by agentops/middleware.py, with its own message.)
    assert response.status_code == 400
    assert b"6-digit" in response.content or bad == "\x00"
    enroller = Client()
    enroller.force_login(olivia)
    assert enroller.post("/accounts/two-factor/remove/", {"code": bad}).status_code == 400
    assert TOTPDevice.objects.filter(pk=enrolled.pk).exists()


def test_the_admin_password_form_cannot_skip_the_code(enrolled, olivia):
    olivia.is_staff = True
    olivia.save()
    client = Client()
    response = client.post("/admin/login/", {"username": "olivia", "password": "pw-olivia"})
    assert response.status_code == 302 and "_auth_user_id" not in client.session


# The policy.


@pytest.mark.parametrize(
    "scope,covered",
    [("", False), ("all", True), ("operator", True), ("approver", False), ("admin", False)],
)
def test_the_policy_sends_people_in_scope_to_enrol(settings, olivia, scope, covered):
    settings.MFA_REQUIRED = scope
    client = Client()
    sign_in(client)
    response = client.get("/runs/?page=2")
    if covered:
        assert response.status_code == 302
        assert response["Location"] == "/accounts/two-factor/?next=%2Fruns%2F%3Fpage%3D2"
        assert client.post("/runs/new/", {}).status_code == 302
        # The enrolment page itself, sign-out and the API with a token stay reachable.
        assert client.get("/accounts/two-factor/").status_code == 200
        assert client.get("/api/runs").status_code == 403
    else:
        assert response.status_code == 200


def test_approver_scope_covers_admins(settings, django_user_model):
    settings.MFA_REQUIRED = "approver"
    make_user(django_user_model, "ada", "admin")
    client = Client()
    client.post("/accounts/login/", {"username": "ada", "password": "pw-ada"})
    assert client.get("/runs/")["Location"].startswith("/accounts/two-factor/")


def test_enrolling_lets_a_person_in_scope_go_on(settings, olivia):
    settings.MFA_REQUIRED = "all"
    client = Client()
    sign_in(client)
    client.post("/accounts/two-factor/start/")
    device = TOTPDevice.objects.get(user=olivia)
    response = client.post(
        "/accounts/two-factor/confirm/", {"code": code(device), "next": "/runs/?page=2"}
    )
    # First to the recovery codes made with the first factor (shown once), which lead on.
    assert response["Location"] == "/accounts/two-factor/?next=%2Fruns%2F%3Fpage%3D2"
    page = client.get(response["Location"]).content.decode()
    assert 'id="recovery-codes-continue"' in page and 'href="/runs/?page=2"' in page
    assert client.get("/runs/").status_code == 200


def test_sign_out_is_exempt(settings, olivia):
    settings.MFA_REQUIRED = "all"
    client = Client()
    sign_in(client)
    assert client.post("/accounts/logout/")["Location"] == "/accounts/login/"
    assert "_auth_user_id" not in client.session


def test_a_token_caller_is_not_sent_to_enrol(settings, olivia):
    from accounts.models import ApiToken

    settings.MFA_REQUIRED = "all"
    _, raw = ApiToken.issue(olivia, "ci")
    response = Client().get("/api/runs", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 200


def test_single_sign_on_sessions_are_left_alone(settings, olivia, enrolled):
    settings.MFA_REQUIRED = "all"
    settings.AUTHENTICATION_BACKENDS = [*settings.AUTHENTICATION_BACKENDS, SSO_BACKEND]
    TOTPDevice.objects.filter(user=olivia).delete()
    client = Client()
    client.force_login(olivia, backend=SSO_BACKEND)
    # No device, in scope: the provider did the second factor, the page is served.
    assert client.get("/runs/").status_code == 200
    assert b"single sign-on" in client.get("/accounts/two-factor/").content


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
@pytest.mark.parametrize("enrolled_first", [False, True])
async def test_sockets_refuse_a_person_who_must_enrol_first(settings, olivia, enrolled_first):
    from asgiref.sync import sync_to_async
    from channels.testing import WebsocketCommunicator

    from agentops.asgi import application

    settings.MFA_REQUIRED = "all"
    if enrolled_first:
        await TOTPDevice.objects.acreate(user=olivia, name="app", confirmed=True)

    @sync_to_async
    def cookie() -> bytes:
        client = Client()
        client.force_login(olivia)
        return f"sessionid={client.cookies['sessionid'].value}".encode()

    headers = [(b"origin", b"http://testserver"), (b"cookie", await cookie())]
    communicator = WebsocketCommunicator(application, "/ws/runs/", headers=headers)
    # The handshake is answered before the check (runs/consumers.py `admit`); a refusal
    # closes the socket with 4403 before any frame.
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    if enrolled_first:
        assert await communicator.receive_nothing(timeout=1)
    else:
        closed = await communicator.receive_output(timeout=5)
        assert closed == {"type": "websocket.close", "code": 4403}
    await communicator.disconnect()


def test_a_password_for_another_account_signs_the_previous_one_out(olivia, enrolled, admin_user):
    client = Client()
    client.force_login(admin_user)
    sign_in(client)
    # Waiting for olivia's code: the admin is no longer signed in on this browser.
    assert "_auth_user_id" not in client.session
    assert not signed_in(client)
    assert client.post("/accounts/two-factor/verify/", {"code": code(enrolled)}).status_code == 302
    assert client.session["_auth_user_id"] == str(olivia.pk)


def test_an_admin_removes_a_lost_device_in_the_admin(olivia, enrolled, admin_user):
    admin_user.is_staff = admin_user.is_superuser = True
    admin_user.save()
    client = Client()
    client.force_login(admin_user)
    page = client.get("/admin/otp_totp/totpdevice/")
    assert page.status_code == 200 and b"olivia" in page.content
    detail = client.get(f"/admin/otp_totp/totpdevice/{enrolled.pk}/change/")
    # The secret is not shown there.
    assert detail.status_code == 200 and enrolled.key.encode() not in detail.content
    response = client.post(f"/admin/otp_totp/totpdevice/{enrolled.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302 and not TOTPDevice.objects.exists()
    # The password alone signs olivia in again (and she may set up a new device).
    assert sign_in(Client())["Location"] == "/"
