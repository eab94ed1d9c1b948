"""Standing grants over the API: role-checked, CSRF on sessions, bad input a 422 with field
errors, and the same rules as the card (approvals/grants/models.py)."""

import pytest
from django.test import Client

from accounts.models import ApiToken
from approvals import decisions
from approvals.models import Approval, Grant
from runs.models import Run
from tests.conftest import make_user

from . import grant_agents  # noqa: F401  (registers test-crediter)
from .conftest import drive, gated

pytestmark = pytest.mark.django_db


def token_client(user) -> Client:
    _, raw = ApiToken.issue(user, "tests")
    return Client(headers={"Authorization": f"Bearer {raw}"})


def post(client: Client, path: str, body: dict | None = None):
    return client.post(path, body or {}, content_type="application/json")


@pytest.fixture
def credit(no_enqueue):
    return gated("test-crediter", {"to": "acme", "amounts": "10,20,30"})


@pytest.mark.parametrize(
    ("role", "expected"),
    [("viewer", 403), ("operator", 403), ("approver", 201), ("admin", 201)],
)
def test_only_approvers_grant(role, expected, django_user_model, credit):
    _, approval = credit
    client = token_client(make_user(django_user_model, f"{role}-user", role))
    response = post(client, f"/api/approvals/{approval.pk}/grant", {"scope": "run"})
    assert response.status_code == expected, response.content
    assert Grant.objects.count() == (1 if expected == 201 else 0)
    assert client.get("/api/grants").status_code == (200 if expected == 201 else 403)


def test_anonymous_is_401_and_a_session_needs_the_csrf_token(bea, credit):
    _, approval = credit
    path = f"/api/approvals/{approval.pk}/grant"
    assert post(Client(), path, {"scope": "run"}).status_code == 401
    session = Client(enforce_csrf_checks=True)
    session.force_login(bea)
    assert post(session, path, {"scope": "run"}).status_code == 403
    assert not Grant.objects.exists()


def test_grant_envelope_list_and_revoke(bea, dan, credit):
    run, approval = credit
    body = {
        "scope": "agent",
        "envelope": [{"arg": "amount", "op": "lte", "value": "20"}],
        "expires_in_seconds": 3600,
        "note": "quiet afternoon",
    }
    response = post(token_client(bea), f"/api/approvals/{approval.pk}/grant", body)
    assert response.status_code == 201, response.content
    made = response.json()
    assert made["approval_status"] == "approved"
    assert made["granted_by"] == "bea" and made["active"] is True
    assert made["envelope"] == [{"arg": "amount", "op": "lte", "value": "20"}]
    assert drive(run) == Run.Status.WAITING
    assert Approval.objects.get(run=run, status="pending").args["amount"] == "30"

    listed = token_client(dan).get("/api/grants").json()
    assert [g["id"] for g in listed["items"]] == [made["id"]]
    assert listed["items"][0]["uses"] == 1
    revoked = post(token_client(dan), f"/api/grants/{made['id']}/revoke")
    assert revoked.status_code == 200
    assert revoked.json()["revoked_by"] == "dan" and revoked.json()["active"] is False
    assert post(token_client(dan), f"/api/grants/{made['id']}/revoke").status_code == 409
    assert token_client(dan).get("/api/grants").json()["items"] == []
    assert len(token_client(dan).get("/api/grants?active=false").json()["items"]) == 1
    assert post(token_client(dan), "/api/grants/9999/revoke").status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"scope": "agent"}, "scope"),
        ({"scope": "agent", "max_uses": 0}, "max_uses"),
        ({"scope": "agent", "max_uses": 100000}, "max_uses"),
        ({"scope": "agent", "expires_in_seconds": 90 * 86400}, "expires_at"),
        ({"scope": "run", "envelope": [{"arg": "nope", "op": "eq", "value": 1}]}, "envelope.nope"),
        ({"scope": "run", "envelope": [{"arg": "amount", "op": "lte", "value": "x"}]}, "amount"),
    ],
)
def test_bounds_out_of_range_are_422_with_the_field(bea, credit, body, field):
    _, approval = credit
    response = post(token_client(bea), f"/api/approvals/{approval.pk}/grant", body)
    assert response.status_code == 422, response.content
    assert any(field in key for key in response.json()["errors"]), response.json()
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING


@pytest.mark.parametrize(
    "body",
    [
        {"scope": "forever"},
        {"scope": "run", "envelope": [{"arg": "amount", "op": "gt", "value": 1}]},
        {"scope": "run", "expires_in_seconds": -5},
        {"scope": "agent", "expires_in_seconds": 10**12},  # past any date: not a 500
        {"scope": "run", "max_uses": "lots"},
        {},
    ],
)
def test_malformed_bodies_are_422(bea, credit, body):
    _, approval = credit
    response = post(token_client(bea), f"/api/approvals/{approval.pk}/grant", body)
    assert response.status_code == 422
    assert not Grant.objects.exists()


def test_high_risk_is_refused_and_unknown_approval_is_404(bea, no_enqueue):
    _, approval = gated("test-payer", {"to": "acme", "amount": "800.00"})
    response = post(token_client(bea), f"/api/approvals/{approval.pk}/grant", {"scope": "run"})
    assert response.status_code == 422
    assert "high-risk" in response.json()["detail"]
    missing = "/api/approvals/00000000-0000-0000-0000-000000000000/grant"
    assert post(token_client(bea), missing, {"scope": "run"}).status_code == 404


def test_a_grant_from_another_call_than_shown_is_409(bea, credit):
    _, approval = credit
    body = {"scope": "run", "shown_args_hash": "not-this-call"}
    response = post(token_client(bea), f"/api/approvals/{approval.pk}/grant", body)
    assert response.status_code == 409
    assert not Grant.objects.exists()


def test_the_openapi_schema_documents_grants(bea):
    client = token_client(bea)
    paths = client.get("/api/openapi.json").json()["paths"]
    assert "/api/approvals/{approval_id}/grant" in paths
    assert "/api/grants/{grant_id}/revoke" in paths
    assert "/api/approvals/{approval_id}/resume-halted" in paths


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_a_grant_from_a_decided_approval_is_409_and_grants_nothing(bea, dan, credit, decision):
    _, approval = credit
    decisions.decide(approval.pk, user=dan, decision=decision, reason="seen")
    body = {"scope": "agent", "max_uses": 5, "shown_args_hash": approval.args_hash}
    response = post(token_client(bea), f"/api/approvals/{approval.pk}/grant", body)
    assert response.status_code == 409, response.content
    assert "already" in response.json()["detail"] and "by dan" in response.json()["detail"]
    assert not Grant.objects.exists()
