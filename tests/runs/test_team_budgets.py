"""A team's budget (runs/budgets/models.py): its spend sums the agents the team owns; a launch of
any of them is refused past its stop threshold; admins and the team's administrators set it on
the Budgets page and the API, its members see it, others neither see nor touch it."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse

from accounts.models import ApiToken, Team, TeamAgent, TeamMember
from runs.budgets import models as budgets
from runs.models import Budget

from .factories import make_run
from .test_costs import record

pytestmark = pytest.mark.django_db


@pytest.fixture
def ops(viewer, operator):
    """Team Ops owns sql-analyst and refund-desk; the viewer administers it, the operator is
    a plain member."""
    team = Team.objects.create(name="Ops", slug="ops")
    for agent in ("sql-analyst", "refund-desk"):
        TeamAgent.objects.create(team=team, agent=agent)
    TeamMember.objects.create(team=team, user=viewer, administer=True)
    TeamMember.objects.create(team=team, user=operator, launch=True)
    return team


def bearer(user) -> Client:
    _, raw = ApiToken.issue(user, "tests")
    return Client(headers={"Authorization": f"Bearer {raw}"})


def test_a_teams_spend_sums_the_agents_it_owns(ops, operator, no_enqueue):
    TeamAgent.objects.filter(team=ops, agent="refund-desk").delete()
    now = datetime.now(UTC)
    record(make_run(operator), now, cost="3", tokens_in=1, tokens_out=1)
    record(make_run(operator, agent="refund-desk"), now, cost="50", tokens_in=1, tokens_out=1)
    budget = Budget.objects.create(team=ops, period="day", amount_usd=Decimal("10"))
    state = budgets.state_of(budget)
    assert state.spent_usd == Decimal("3") and state.level == "ok"  # not refund-desk's 50
    assert state.agents == ("sql-analyst",)
    # An agent the team takes on counts from the next read (the engine's cache is dropped).
    assert [b.pk for b in budgets.budgets_of("refund-desk")] == []
    TeamAgent.objects.create(team=ops, agent="refund-desk")
    assert [b.pk for b in budgets.budgets_of("refund-desk")] == [budget.pk]
    state = budgets.state_of(budget)
    assert (state.spent_usd, state.level) == (Decimal("53"), "stop")
    assert state.agents == ("refund-desk", "sql-analyst")


def test_a_launch_past_the_teams_stop_threshold_is_refused(ops, operator, no_enqueue):
    Budget.objects.create(team=ops, period="day", amount_usd=Decimal("1"))
    record(make_run(operator), datetime.now(UTC), cost="1.5", tokens_in=1, tokens_out=1)
    # refund-desk spent nothing itself: its team did.
    response = bearer(operator).post(
        "/api/runs",
        {"agent": "refund-desk", "input": {"order_id": 42, "reason": "damaged"}},
        content_type="application/json",
    )
    assert response.status_code == 409
    assert response.json()["detail"].startswith(
        "budget exceeded: team Ops (refund-desk, sql-analyst) has spent 1.50"
    )
    client = Client()
    client.force_login(operator)
    page = client.post(
        reverse("runs:new"), {"agent": "refund-desk", "order_id": "42", "reason": "damaged"}
    )
    assert "budget exceeded: team Ops" in page.content.decode()


FORM = {
    "team": "ops",
    "period": "week",
    "time_zone": "Europe/Paris",
    "amount_usd": "50",
    "warn_percent": "80",
    "approve_percent": "100",
    "stop_percent": "120",
}


def test_the_teams_administrator_sets_its_budget_on_the_page(client, ops, viewer):
    client.force_login(viewer)
    page = client.get(reverse("runs:budgets")).content.decode()
    assert "Add a budget" in page and 'name="agent"' not in page  # a team's budget only
    assert client.post(reverse("runs:budgets"), FORM).status_code == 302
    budget = Budget.objects.get()
    assert (budget.team, budget.agent, budget.updated_by) == (ops, "", viewer)
    edit = reverse("runs:budget_edit", args=[budget.pk])
    assert '<option value="ops" selected>Ops</option>' in client.get(edit).content.decode()
    assert client.post(edit, {**FORM, "amount_usd": "60"}).status_code == 302
    budget.refresh_from_db()
    assert budget.amount_usd == Decimal("60")
    assert client.post(reverse("runs:budget_delete", args=[budget.pk])).status_code == 302
    assert not Budget.objects.exists()


def test_the_teams_administrator_sets_no_other_budget(client, ops, viewer):
    other = Team.objects.create(name="Other", slug="other")
    client.force_login(viewer)
    # Another team's, or an agent's: a form error (not theirs to choose), nothing saved.
    response = client.post(reverse("runs:budgets"), {**FORM, "team": "other"})
    assert response.status_code == 422 and not Budget.objects.exists()
    response = client.post(reverse("runs:budgets"), {**FORM, "team": "", "agent": "sql-analyst"})
    assert response.status_code == 422 and not Budget.objects.exists()
    # Nor change one an admin set.
    theirs = Budget.objects.create(team=other, period="day", amount_usd=Decimal("5"))
    agents = Budget.objects.create(agent="sql-analyst", period="day", amount_usd=Decimal("5"))
    for budget in (theirs, agents):
        assert client.get(reverse("runs:budget_edit", args=[budget.pk])).status_code == 403
        assert client.post(reverse("runs:budget_delete", args=[budget.pk])).status_code == 403
    assert Budget.objects.count() == 2


def test_members_see_their_teams_budget_and_others_do_not(client, ops, operator, approver):
    Budget.objects.create(team=ops, period="day", amount_usd=Decimal("5"))
    other = Team.objects.create(name="Other", slug="other")
    Budget.objects.create(team=other, period="day", amount_usd=Decimal("7"))
    client.force_login(operator)  # a member who does not administer
    page = client.get(reverse("runs:budgets")).content.decode()
    assert 'data-team="ops"' in page and 'data-team="other"' not in page
    assert "Add a budget" not in page and "Edit</a>" not in page
    budget = Budget.objects.get(team=ops)
    assert client.get(reverse("runs:budget_edit", args=[budget.pk])).status_code == 403
    client.force_login(approver)  # in no team
    assert 'data-team="ops"' not in client.get(reverse("runs:budgets")).content.decode()


def test_the_api_follows_the_same_rules(ops, viewer, operator, admin_user):
    body = {"team": "ops", "period": "day", "amount_usd": "20"}
    created = bearer(viewer).post("/api/budgets", body, content_type="application/json")
    assert created.status_code == 201, created.content
    data = created.json()
    assert (data["team"], data["agent"], data["agents"]) == (
        "ops",
        "",
        ["refund-desk", "sql-analyst"],
    )
    url = f"/api/budgets/{data['id']}"
    # A plain member reads it but may not change it; someone outside the team does not see it.
    assert bearer(operator).get(url).status_code == 200
    assert bearer(operator).delete(url).status_code == 403
    outsider = bearer(admin_user.__class__.objects.create_user("zed", password="x"))
    assert outsider.get(url).status_code in (403, 404)
    # The administrator may not name an agent, nor both, nor neither.
    for wrong in ({"agent": "sql-analyst"}, {"agent": "sql-analyst", "team": "ops"}):
        response = bearer(viewer).post(
            "/api/budgets",
            {"period": "week", "amount_usd": "1", **wrong},
            content_type="application/json",
        )
        assert response.status_code == 422, (wrong, response.content)
    both = bearer(admin_user).post(
        "/api/budgets",
        {"agent": "sql-analyst", "team": "ops", "period": "week", "amount_usd": "1"},
        content_type="application/json",
    )
    assert both.status_code == 422 and "Name an agent or a team" in both.content.decode()
    replaced = bearer(viewer).put(
        url, {**body, "amount_usd": "30"}, content_type="application/json"
    )
    assert replaced.status_code == 200 and Decimal(replaced.json()["amount_usd"]) == 30
    assert bearer(viewer).delete(url).status_code == 204
