"""Budgets in the JSON API: read with their current spend by anyone who sees runs, changed by
admins only, bad input a 422 with field errors; a launch past the stop threshold is a 409."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.test import Client

from accounts.models import ApiToken
from runs.models import Budget

from .factories import make_run
from .test_costs import record

pytestmark = pytest.mark.django_db

BODY = {"agent": "sql-analyst", "period": "day", "time_zone": "Asia/Tokyo", "amount_usd": "20"}


def bearer(user) -> Client:
    _, raw = ApiToken.issue(user, "tests")
    return Client(headers={"Authorization": f"Bearer {raw}"})


def test_an_admin_adds_reads_replaces_and_removes_a_budget(admin_user, operator, no_enqueue):
    api = bearer(admin_user)
    created = api.post("/api/budgets", BODY, content_type="application/json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["agent"], body["period"], body["time_zone"]) == (
        "sql-analyst",
        "day",
        "Asia/Tokyo",
    )
    assert (body["warn_percent"], body["approve_percent"], body["stop_percent"]) == (80, 100, 120)
    assert body["level"] == "ok" and Decimal(body["spent_usd"]) == 0
    # A Tokyo day starts at 15:00 UTC.
    assert body["period_start"].endswith("T15:00:00Z")

    record(make_run(operator), datetime.now(UTC), cost="17", tokens_in=1, tokens_out=1)
    (listed,) = bearer(operator).get("/api/budgets").json()
    assert listed["level"] == "warn" and listed["percent"] == "85.0"

    replaced = api.put(
        f"/api/budgets/{body['id']}", {**BODY, "amount_usd": "10"}, content_type="application/json"
    )
    assert replaced.status_code == 200 and replaced.json()["level"] == "stop"
    assert api.delete(f"/api/budgets/{body['id']}").status_code == 204
    assert not Budget.objects.exists()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"warn_percent": 120}, "__all__"),
        ({"amount_usd": "-1"}, "amount_usd"),
        ({"time_zone": "Nowhere/Land"}, "time_zone"),
        ({"agent": "nobody"}, "agent"),
    ],
)
def test_bad_input_is_422_with_the_field(admin_user, change, field):
    response = bearer(admin_user).post(
        "/api/budgets", {**BODY, **change}, content_type="application/json"
    )
    assert response.status_code == 422
    assert [e["loc"][-1] for e in response.json()["errors"]] == [field]
    assert not Budget.objects.exists()


def test_a_period_that_is_not_one_is_422(admin_user):
    response = bearer(admin_user).post(
        "/api/budgets", {**BODY, "period": "fortnight"}, content_type="application/json"
    )
    assert response.status_code == 422


def test_a_duplicate_is_422(admin_user):
    api = bearer(admin_user)
    assert api.post("/api/budgets", BODY, content_type="application/json").status_code == 201
    again = api.post("/api/budgets", BODY, content_type="application/json")
    assert again.status_code == 422 and "already has a budget" in again.content.decode()


def test_only_admins_change_budgets(operator, approver):
    budget = Budget.objects.create(agent="sql-analyst", amount_usd=Decimal("5"))
    for user in (operator, approver):
        api = bearer(user)
        assert api.post("/api/budgets", BODY, content_type="application/json").status_code == 403
        url = f"/api/budgets/{budget.pk}"
        assert api.put(url, BODY, content_type="application/json").status_code == 403
        assert api.delete(url).status_code == 403
        assert api.get(url).status_code == 200
    assert Client().get("/api/budgets").status_code == 401
    assert Budget.objects.get().amount_usd == Decimal("5")


def test_a_launch_past_the_stop_threshold_is_409(operator, no_enqueue):
    Budget.objects.create(agent="sql-analyst", period="day", amount_usd=Decimal("1"))
    record(make_run(operator), datetime.now(UTC), cost="1.5", tokens_in=1, tokens_out=1)
    response = bearer(operator).post(
        "/api/runs",
        {
            "agent": "sql-analyst",
            "input": {"question": "Revenue?", "report_to": "boss@example.com"},
        },
        content_type="application/json",
    )
    assert response.status_code == 409
    assert response.json()["detail"].startswith("budget exceeded: sql-analyst has spent 1.50")


def test_the_budgets_api_is_described_in_openapi(viewer):
    paths = bearer(viewer).get("/api/openapi.json").json()["paths"]
    assert {"get", "post"} <= set(paths["/api/budgets"])
    assert {"get", "put", "delete"} <= set(paths["/api/budgets/{budget_id}"])
