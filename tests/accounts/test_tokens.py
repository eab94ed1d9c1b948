"""API tokens: `manage.py issue_token` prints one once; only its hash is stored."""

import hashlib
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from accounts.models import LAST_USED_PRECISION, ApiToken


def issue(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("issue_token", *args, stdout=out, stderr=err)
    return out.getvalue().strip(), err.getvalue()


def api_get(raw: str, path: str = "/api/runs"):
    return Client().get(path, headers={"Authorization": f"Bearer {raw}"})


@pytest.mark.django_db
def test_issue_token_prints_a_token_that_authenticates_as_the_user(operator):
    raw, note = issue("olivia", "--name", "ci pipeline")
    assert raw.startswith("ao_") and len(raw) > 40 and "\n" not in raw
    assert "shown only once" in note
    token = ApiToken.objects.get()
    assert token.user == operator and token.name == "ci pipeline"
    assert token.key_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert raw not in (token.key_hash, token.prefix, token.name)  # the raw value is not kept
    assert token.prefix == raw[:8] and token.last_used_at is None

    response = api_get(raw)
    assert response.status_code == 200
    token.refresh_from_db()
    assert token.last_used_at is not None


@pytest.mark.django_db
def test_last_use_is_written_at_most_once_a_minute(operator):
    raw, _ = issue("olivia")
    assert api_get(raw).status_code == 200
    first = ApiToken.objects.get().last_used_at
    assert api_get(raw).status_code == 200
    assert ApiToken.objects.get().last_used_at == first  # no write per request

    ApiToken.objects.update(last_used_at=first - LAST_USED_PRECISION)
    assert api_get(raw).status_code == 200
    assert ApiToken.objects.get().last_used_at > first


@pytest.mark.django_db
def test_each_issue_is_a_new_token_and_the_default_name_is_cli(operator):
    first, _ = issue("olivia")
    second, _ = issue("olivia")
    assert first != second
    assert list(ApiToken.objects.values_list("name", flat=True)) == ["cli", "cli"]
    assert api_get(first).status_code == 200 and api_get(second).status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nobody"], "no user named 'nobody'"),
        (["olivia", "--name", "   "], "--name"),
        (["olivia", "--name", "x" * 101], "--name"),
    ],
)
def test_issue_token_refuses_bad_arguments_and_creates_nothing(operator, args, message):
    with pytest.raises(CommandError, match=message):
        issue(*args)
    assert ApiToken.objects.count() == 0


@pytest.mark.django_db
def test_issue_token_refuses_an_inactive_user(operator):
    operator.is_active = False
    operator.save()
    with pytest.raises(CommandError, match="inactive"):
        issue("olivia")
    assert ApiToken.objects.count() == 0


@pytest.mark.django_db
def test_a_token_stops_working_when_its_user_is_deactivated_or_it_is_deleted(operator):
    raw, _ = issue("olivia")
    assert api_get(raw).status_code == 200
    operator.is_active = False
    operator.save()
    assert api_get(raw).status_code == 401
    operator.is_active = True
    operator.save()
    assert api_get(raw).status_code == 200
    ApiToken.objects.all().delete()
    assert api_get(raw).status_code == 401


@pytest.mark.django_db
def test_a_token_carries_its_users_roles(viewer):
    raw, _ = issue("victor")
    assert api_get(raw).status_code == 200
    response = Client(enforce_csrf_checks=True).post(
        "/api/runs",
        data={"agent": "refund-desk", "input": {"order_id": 1, "reason": "x"}},
        content_type="application/json",
        headers={"Authorization": f"Bearer {raw}"},
    )
    assert response.status_code == 403
