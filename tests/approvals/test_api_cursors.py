"""The approvals queue and the grants over the API page by keyset cursor (runs/api_paging.py):
approvals decided between two pages never make the next page skip one (as OFFSET did), a
cursor the list cannot read is a 422 naming `cursor`, and counts stop at their cap."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from accounts.models import ApiToken
from approvals.models import Approval, Grant
from runs import api_paging
from tests.conftest import make_user

from .conftest import gated

pytestmark = pytest.mark.django_db

BIG = {"to": "acme", "amount": "800.00"}


def token_client(user) -> Client:
    _, raw = ApiToken.issue(user, "tests")
    return Client(headers={"Authorization": f"Bearer {raw}"})


@pytest.fixture
def five_pending(operator, no_enqueue) -> list[Approval]:
    """Five pending approvals of one risk, in queue order (nearest deadline first)."""
    approvals = [gated("test-payer", BIG, by=operator)[1] for _ in range(5)]
    soon = timezone.now() + timedelta(hours=1)
    for i, approval in enumerate(approvals):
        Approval.objects.filter(pk=approval.pk).update(expires_at=soon + timedelta(minutes=i))
    return approvals


def ids(page: dict) -> list[str]:
    return [item["id"] for item in page["items"]]


def test_approvals_decided_between_two_pages_make_the_next_skip_none(
    five_pending, django_user_model
):
    client = token_client(make_user(django_user_model, "val", "viewer"))
    queue = [str(a.pk) for a in five_pending]
    first = client.get("/api/approvals", {"limit": 2}).json()
    assert ids(first) == queue[:2] and first["count"] == 5 and first["count_capped"] is False
    # The approver decides the first one meanwhile: it leaves the pending queue.
    Approval.objects.filter(pk=queue[0]).update(
        status=Approval.Status.APPROVED, decided_at=timezone.now()
    )
    second = client.get("/api/approvals", {"limit": 2, "cursor": first["next_cursor"]}).json()
    assert ids(second) == queue[2:4]
    # What OFFSET paging did: the queue moved up under it and the third approval was skipped.
    assert ids(client.get("/api/approvals", {"limit": 2, "offset": 2}).json()) == queue[3:5]
    last = client.get("/api/approvals", {"limit": 2, "cursor": second["next_cursor"]}).json()
    assert ids(last) == queue[4:] and last["next_cursor"] is None


def test_assigned_to_me_pages_by_cursor_too(five_pending, approver):
    client = token_client(approver)
    queue = [str(a.pk) for a in five_pending]
    first = client.get("/api/approvals", {"limit": 3, "assigned_to_me": "true"}).json()
    assert ids(first) == queue[:3] and first["count"] == 5
    query = {"limit": 3, "assigned_to_me": "true", "cursor": first["next_cursor"]}
    second = client.get("/api/approvals", query).json()
    assert ids(second) == queue[3:] and second["next_cursor"] is None


@pytest.mark.parametrize("cursor", ["bm9wZQ", "x" * 201, api_paging.encode("1.2.not-hex")])
def test_a_bad_approvals_cursor_is_a_422_naming_it(five_pending, django_user_model, cursor):
    client = token_client(make_user(django_user_model, "val", "viewer"))
    response = client.get("/api/approvals", {"cursor": cursor})
    assert response.status_code == 422
    assert response.json()["errors"]["cursor"] == [
        "not a page's cursor (give a page's next_cursor)"
    ]
    both = client.get("/api/approvals", {"cursor": "x", "offset": 2})
    assert both.status_code == 422 and "cursor" in both.json()["errors"]


def test_the_approvals_count_stops_at_its_cap(five_pending, django_user_model, monkeypatch):
    monkeypatch.setattr(api_paging, "COUNT_CAP", 3)
    client = token_client(make_user(django_user_model, "val", "viewer"))
    body = client.get("/api/approvals", {"limit": 1}).json()
    assert body["count"] == 3 and body["count_capped"] is True


def test_grants_page_by_cursor_and_new_grants_shift_nothing(django_user_model):
    admin = make_user(django_user_model, "ada", "admin")
    client = token_client(admin)
    start = timezone.now() - timedelta(hours=1)

    def grant(minutes: int) -> Grant:
        return Grant.objects.create(
            scope=Grant.Scope.AGENT,
            agent="test-payer",
            tool="test_pay",
            granted_by=admin,
            granted_by_name="ada",
            granted_at=start + timedelta(minutes=minutes),
            expires_at=timezone.now() + timedelta(days=1),
        )

    newest_first = [str(grant(m).pk) for m in range(5)][::-1]
    first = client.get("/api/grants", {"limit": 2, "active": "false"}).json()
    assert [g["id"] for g in first["items"]] == [int(i) for i in newest_first[:2]]
    assert first["count"] == 5 and first["count_capped"] is False
    grant(30)  # the newest: before every page read so far
    query = {"limit": 2, "active": "false", "cursor": first["next_cursor"]}
    second = client.get("/api/grants", query).json()
    assert [g["id"] for g in second["items"]] == [int(i) for i in newest_first[2:4]]
    bad = client.get("/api/grants", {"cursor": api_paging.encode("yesterday|1")})
    assert bad.status_code == 422 and "cursor" in bad.json()["errors"]
