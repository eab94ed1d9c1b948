"""Security keys and passkeys (accounts/passkeys.py, accounts/passkey_views.py): both WebAuthn
ceremonies through the real py_webauthn verification, answered by a software authenticator
(tests/support/soft_authenticator.py): registration, sign-in at the second step, challenges
used once, wrong origin, cloned keys, other people's keys, removal."""

import json
from types import SimpleNamespace

import pytest
from django.test import Client
from django_otp import DEVICE_ID_SESSION_KEY

from accounts import passkeys, recovery_codes, two_factor
from accounts.models import WebAuthnCredential
from tests.conftest import make_user
from tests.support.soft_authenticator import SoftAuthenticator

pytestmark = pytest.mark.django_db

ORIGIN = "http://testserver"


@pytest.fixture
def olivia(django_user_model):
    return make_user(django_user_model, "olivia", "operator")


def post_json(client: Client, url: str, body=None):
    return client.post(url, json.dumps(body or {}), content_type="application/json")


def register(client: Client, authenticator: SoftAuthenticator, name: str = "YubiKey", **kw):
    options = post_json(client, "/accounts/two-factor/keys/options/")
    assert options.status_code == 200
    answer = authenticator.register(options.json(), **kw)
    return post_json(client, "/accounts/two-factor/keys/", {"name": name, "credential": answer})


@pytest.fixture
def authenticator() -> SoftAuthenticator:
    return SoftAuthenticator(ORIGIN)


@pytest.fixture
def key(olivia, authenticator) -> WebAuthnCredential:
    client = Client()
    client.force_login(olivia)
    assert register(client, authenticator).status_code == 200
    return WebAuthnCredential.objects.get(user=olivia)


def sign_in(client: Client, next_url: str = "") -> None:
    data = {"username": "olivia", "password": "pw-olivia"}
    if next_url:
        data["next"] = next_url
    response = client.post("/accounts/login/", data)
    assert response["Location"] == "/accounts/two-factor/verify/"


def answer_prompt(client: Client, authenticator: SoftAuthenticator, **kw):
    options = post_json(client, "/accounts/two-factor/verify/key/options/")
    assert options.status_code == 200, options.content
    return post_json(
        client,
        "/accounts/two-factor/verify/key/",
        {"credential": authenticator.authenticate(options.json(), **kw)},
    )


def signed_in(client: Client) -> bool:
    return client.get("/runs/").status_code == 200


# Registration.


def test_a_person_adds_a_key_and_gets_recovery_codes(olivia, authenticator, caplog):
    client = Client()
    client.force_login(olivia)
    options = post_json(client, "/accounts/two-factor/keys/options/").json()
    assert options["rp"] == {"id": "testserver", "name": "agentops"}
    assert options["user"]["name"] == "olivia"
    with caplog.at_level("INFO", logger="agentops.security"):
        response = post_json(
            client,
            "/accounts/two-factor/keys/",
            {"name": "Laptop <b>", "credential": authenticator.register(options)},
        )
    assert response.status_code == 200 and response.json() == {"redirect": "/accounts/two-factor/"}
    key = WebAuthnCredential.objects.get(user=olivia)
    assert key.name == "Laptop <b>" and key.sign_count == 0 and key.transports == ["internal"]
    assert two_factor.has_second_factor(olivia)
    assert any(getattr(r, "security_event", "") == "webauthn_added" for r in caplog.records)
    page = client.get("/accounts/two-factor/").content.decode()
    assert "Laptop &lt;b&gt;" in page and "Laptop <b>" not in page
    # The first factor came with recovery codes, shown on this page once.
    assert recovery_codes.remaining(olivia) == 10 and 'id="recovery-codes-fresh"' in page
    # A second key is excluded from registering twice, and brings no new codes.
    options = post_json(client, "/accounts/two-factor/keys/options/").json()
    assert [d["id"] for d in options["excludeCredentials"]] == [key.credential_id]


def test_the_same_key_twice_is_refused(olivia, authenticator, key):
    client = Client()
    client.force_login(olivia)
    response = register(client, authenticator)
    assert response.status_code == 400 and "already registered" in response.json()["error"]
    assert WebAuthnCredential.objects.filter(user=olivia).count() == 1


def test_an_answer_from_another_origin_is_refused(olivia, authenticator):
    client = Client()
    client.force_login(olivia)
    response = register(client, authenticator, origin="https://evil.example")
    assert response.status_code == 400 and "not accepted" in response.json()["error"]
    assert not WebAuthnCredential.objects.exists()


def test_a_key_made_for_another_rp_is_refused(olivia, authenticator):
    client = Client()
    client.force_login(olivia)
    response = register(client, authenticator, rp_id="evil.example")
    assert response.status_code == 400 and not WebAuthnCredential.objects.exists()


def test_a_challenge_is_answered_once(olivia, authenticator):
    client = Client()
    client.force_login(olivia)
    options = post_json(client, "/accounts/two-factor/keys/options/").json()
    body = {"name": "k", "credential": authenticator.register(options)}
    assert post_json(client, "/accounts/two-factor/keys/", body).status_code == 200
    WebAuthnCredential.objects.all().delete()
    replay = post_json(client, "/accounts/two-factor/keys/", body)
    assert replay.status_code == 400 and "expired" in replay.json()["error"]
    assert not WebAuthnCredential.objects.exists()


@pytest.mark.parametrize(
    "body", [b"", b"not json", b"[]", b'{"credential": "x"}', b'{"credential": {}}', b"\xff"]
)
def test_garbage_is_a_clear_400(olivia, body):
    client = Client()
    client.force_login(olivia)
    post_json(client, "/accounts/two-factor/keys/options/")
    response = client.post("/accounts/two-factor/keys/", body, content_type="application/json")
    assert response.status_code == 400 and response.json()["error"]


def test_a_form_post_instead_of_json_is_a_clear_400(olivia):
    client = Client()
    client.force_login(olivia)
    post_json(client, "/accounts/two-factor/keys/options/")
    for data in ({"credential": "x"}, {"file": ("a.txt", b"x")}):
        response = client.post("/accounts/two-factor/keys/", data)
        assert response.status_code == 400 and "could not be read" in response.json()["error"]


def test_the_ceremony_needs_sign_in_post_and_csrf(olivia):
    for url in ("/accounts/two-factor/keys/options/", "/accounts/two-factor/keys/"):
        assert Client().post(url)["Location"].startswith("/accounts/login/")
        client = Client()
        client.force_login(olivia)
        assert client.get(url).status_code == 405
        csrf = Client(enforce_csrf_checks=True)
        csrf.force_login(olivia)
        assert csrf.post(url).status_code == 403


def test_the_rp_id_setting_is_used(settings, olivia):
    settings.WEBAUTHN_RP_ID = "example.com"
    client = Client()
    client.force_login(olivia)
    options = post_json(client, "/accounts/two-factor/keys/options/").json()
    assert options["rp"]["id"] == "example.com"


def test_a_person_removes_their_own_key_only(olivia, key, django_user_model):
    mallory = make_user(django_user_model, "mallory", "operator")
    client = Client()
    client.force_login(mallory)
    assert client.post(f"/accounts/two-factor/keys/{key.pk}/remove/").status_code == 404
    client.force_login(olivia)
    assert client.get(f"/accounts/two-factor/keys/{key.pk}/remove/").status_code == 405
    response = client.post(f"/accounts/two-factor/keys/{key.pk}/remove/")
    assert response["Location"] == "/accounts/two-factor/"
    assert not WebAuthnCredential.objects.exists()


# Sign-in.


def test_a_password_then_the_key_signs_in(olivia, key, authenticator, caplog):
    client = Client()
    sign_in(client, next_url="/approvals/")
    page = client.get("/accounts/two-factor/verify/").content.decode()
    assert 'data-webauthn="authenticate"' in page and 'id="two-factor-verify"' not in page
    assert not signed_in(client)
    with caplog.at_level("INFO", logger="agentops.security"):
        response = answer_prompt(client, authenticator)
    assert response.status_code == 200 and response.json() == {"redirect": "/approvals/"}
    assert signed_in(client)
    assert client.session[DEVICE_ID_SESSION_KEY] == key.persistent_id
    key.refresh_from_db()
    assert key.sign_count == 1 and key.last_used_at is not None
    events = [r for r in caplog.records if getattr(r, "security_event", "") == "mfa_verified"]
    assert events and "security key (YubiKey)" in events[0].getMessage()


def test_the_key_prompt_needs_the_password_first(olivia, key, authenticator):
    client = Client()
    response = post_json(client, "/accounts/two-factor/verify/key/options/")
    assert response.status_code == 400 and "sign in again" in response.json()["error"]
    response = post_json(client, "/accounts/two-factor/verify/key/", {"credential": {}})
    assert response.status_code == 400 and not signed_in(client)


def test_an_answer_without_its_challenge_is_refused(olivia, key, authenticator):
    # Options fetched on one browser, the answer posted on another: no challenge there.
    first, second = Client(), Client()
    sign_in(first)
    sign_in(second)
    options = post_json(first, "/accounts/two-factor/verify/key/options/").json()
    body = {"credential": authenticator.authenticate(options)}
    response = post_json(second, "/accounts/two-factor/verify/key/", body)
    assert response.status_code == 400 and not signed_in(second)
    # And the right browser can answer its challenge once only.
    assert post_json(first, "/accounts/two-factor/verify/key/", body).status_code == 200
    first.post("/accounts/logout/")
    sign_in(first)
    assert post_json(first, "/accounts/two-factor/verify/key/", body).status_code == 400


def test_a_cloned_key_is_refused(olivia, key, authenticator):
    client = Client()
    sign_in(client)
    assert answer_prompt(client, authenticator, advance=5).status_code == 200
    other = Client()
    sign_in(other)
    # A copy of the key whose counter did not move since: refused.
    response = answer_prompt(other, authenticator, advance=0)
    assert response.status_code == 400 and not signed_in(other)
    key.refresh_from_db()
    assert key.sign_count == 5
    assert other.session[two_factor.PENDING_KEY]["tries"] == 1


def test_another_persons_key_does_not_sign_in(olivia, key, django_user_model):
    make_user(django_user_model, "mallory", "operator")
    mallory = django_user_model.objects.get(username="mallory")
    theirs = SoftAuthenticator(ORIGIN)
    client = Client()
    client.force_login(mallory)
    register(client, theirs)
    client = Client()
    sign_in(client)
    response = answer_prompt(client, theirs)
    assert response.status_code == 400 and "not registered" in response.json()["error"]
    assert not signed_in(client)


@pytest.mark.parametrize(
    "mangle",
    [
        lambda c: {"id": c["id"]},
        lambda c: {**c, "response": {**c["response"], "signature": "!!"}},
        lambda c: {**c, "response": {**c["response"], "authenticatorData": "AAAA"}},
        lambda c: {**c, "response": "x"},
        lambda c: {**c, "id": ["x"]},
    ],
)
def test_a_garbled_answer_at_sign_in_is_a_clear_400(olivia, key, authenticator, mangle):
    client = Client()
    sign_in(client)
    options = post_json(client, "/accounts/two-factor/verify/key/options/").json()
    body = {"credential": mangle(authenticator.authenticate(options))}
    response = post_json(client, "/accounts/two-factor/verify/key/", body)
    assert response.status_code == 400 and response.json()["error"]
    assert not signed_in(client)


def test_a_wrong_origin_at_sign_in_is_refused(olivia, key, authenticator):
    client = Client()
    sign_in(client)
    response = answer_prompt(client, authenticator, origin="https://evil.example")
    assert response.status_code == 400 and not signed_in(client)


def test_failed_key_tries_end_the_waiting_sign_in(olivia, key, authenticator):
    client = Client()
    sign_in(client)
    for _ in range(two_factor.MAX_TRIES):
        response = answer_prompt(client, authenticator, origin="https://evil.example")
    assert response.json()["redirect"] == "/accounts/login/"
    assert two_factor.PENDING_KEY not in client.session


def test_a_key_satisfies_the_enrolment_policy(settings, olivia, authenticator):
    settings.MFA_REQUIRED = "all"
    client = Client()
    client.force_login(olivia)
    page = client.get("/runs/?page=2")
    assert page["Location"] == "/accounts/two-factor/?next=%2Fruns%2F%3Fpage%3D2"
    form = client.get(page["Location"]).content.decode()
    assert 'action="/accounts/two-factor/keys/?next=/runs/%3Fpage%3D2"' in form
    options = post_json(client, "/accounts/two-factor/keys/options/").json()
    response = client.post(
        "/accounts/two-factor/keys/?next=/runs/%3Fpage%3D2",
        json.dumps({"name": "k", "credential": authenticator.register(options)}),
        content_type="application/json",
    )
    # On to the recovery codes, which lead where the person was going.
    assert response.json()["redirect"] == "/accounts/two-factor/?next=%2Fruns%2F%3Fpage%3D2"
    assert 'href="/runs/?page=2"' in client.get(response.json()["redirect"]).content.decode()
    assert client.get("/runs/").status_code == 200


def test_the_options_allow_only_this_persons_keys(olivia, key):
    client = Client()
    sign_in(client)
    options = post_json(client, "/accounts/two-factor/verify/key/options/").json()
    assert [d["id"] for d in options["allowCredentials"]] == [key.credential_id]
    assert options["rpId"] == "testserver"
    assert passkeys.AUTHENTICATE_KEY in client.session


# The challenge's life: two minutes, one person.


def clock_moved(monkeypatch, seconds: float) -> None:
    """The ceremony's clock (accounts/passkeys.py) `seconds` after now."""
    moved = passkeys.time.time() + seconds
    monkeypatch.setattr(passkeys, "time", SimpleNamespace(time=lambda: moved))


@pytest.mark.parametrize(
    ("after", "status"),
    [(passkeys.CHALLENGE_SECONDS - 5, 200), (passkeys.CHALLENGE_SECONDS + 5, 400)],
)
def test_a_challenge_is_good_for_two_minutes(
    olivia, key, authenticator, monkeypatch, after, status
):
    client = Client()
    sign_in(client)
    options = post_json(client, "/accounts/two-factor/verify/key/options/").json()
    clock_moved(monkeypatch, after)
    body = {"credential": authenticator.authenticate(options)}
    response = post_json(client, "/accounts/two-factor/verify/key/", body)
    assert response.status_code == status, response.content
    assert signed_in(client) is (status == 200)
    if status == 400:
        assert "expired" in response.json()["error"]


def test_a_registration_challenge_expires_too(olivia, authenticator, monkeypatch):
    client = Client()
    client.force_login(olivia)
    options = post_json(client, "/accounts/two-factor/keys/options/").json()
    clock_moved(monkeypatch, passkeys.CHALLENGE_SECONDS + 5)
    body = {"name": "late", "credential": authenticator.register(options)}
    response = post_json(client, "/accounts/two-factor/keys/", body)
    assert response.status_code == 400 and "expired" in response.json()["error"]
    assert not WebAuthnCredential.objects.exists()


def test_a_challenge_asked_for_one_person_does_not_sign_in_another(olivia, key, django_user_model):
    # One browser: olivia's sign-in asks for her key's options, then mallory gives her own
    # password there (the session is kept, its key rotated) and answers olivia's challenge
    # with her own key. The challenge was issued to olivia's ceremony: refused.
    mallory = make_user(django_user_model, "mallory", "operator")
    theirs = SoftAuthenticator(ORIGIN)
    own = Client()
    own.force_login(mallory)
    assert register(own, theirs).status_code == 200
    client = Client()
    sign_in(client)
    options = post_json(client, "/accounts/two-factor/verify/key/options/").json()
    response = client.post("/accounts/login/", {"username": "mallory", "password": "pw-mallory"})
    assert response["Location"] == "/accounts/two-factor/verify/"
    assert client.session[two_factor.PENDING_KEY]["user_id"] == mallory.pk
    body = {"credential": theirs.authenticate(options)}
    response = post_json(client, "/accounts/two-factor/verify/key/", body)
    assert response.status_code == 400 and "expired" in response.json()["error"]
    assert not signed_in(client)
    # Her own ceremony, asked for her, signs her in.
    assert answer_prompt(client, theirs).status_code == 200 and signed_in(client)
