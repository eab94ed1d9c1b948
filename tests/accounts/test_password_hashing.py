"""Passwords are hashed with PBKDF2 at Django's 1 000 000 iterations. The rest of the suite
signs in with a fast hasher (tests/conftest.py); this test keeps the production one."""

import pytest
from django.contrib.auth.hashers import get_hasher
from django.test import Client

from tests.conftest import FAST_PASSWORD_HASHERS, PRODUCTION_PASSWORD_HASHERS, make_user

pytestmark = pytest.mark.django_db


def test_the_suite_hashes_fast_and_production_does_not():
    assert get_hasher().algorithm == "md5"  # FAST_PASSWORD_HASHERS, in every test
    assert PRODUCTION_PASSWORD_HASHERS != FAST_PASSWORD_HASHERS
    assert PRODUCTION_PASSWORD_HASHERS[0] == "django.contrib.auth.hashers.PBKDF2PasswordHasher"


def test_a_password_is_stored_with_pbkdf2_and_signs_in(settings, django_user_model):
    settings.PASSWORD_HASHERS = PRODUCTION_PASSWORD_HASHERS
    hasher = get_hasher()
    assert hasher.algorithm == "pbkdf2_sha256" and hasher.iterations >= 1_000_000

    user = make_user(django_user_model, "arthur", "approver")
    algorithm, iterations, _salt, _hash = user.password.split("$")
    assert (algorithm, int(iterations)) == ("pbkdf2_sha256", hasher.iterations)

    client = Client()
    response = client.post("/accounts/login/", {"username": "arthur", "password": "pw-arthur"})
    assert response.status_code == 302
    assert client.session["_auth_user_id"] == str(user.pk)
