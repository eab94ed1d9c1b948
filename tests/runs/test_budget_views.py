"""The Budgets page, the dashboard's gauges and a launch past a budget's stop threshold."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse

from runs.models import Budget, Run

from .factories import make_run
from .test_costs import record

pytestmark = pytest.mark.django_db

FORM = {
    "agent": "sql-analyst",
    "period": "week",
    "time_zone": "Europe/Paris",
    "amount_usd": "50",
    "warn_percent": "80",
    "approve_percent": "100",
    "stop_percent": "120",
}


def spend(operator, usd: str, agent: str = "sql-analyst") -> None:
    record(make_run(operator, agent=agent), datetime.now(UTC), cost=usd, tokens_in=1, tokens_out=1)


def test_an_admin_adds_a_budget(client, admin_user):
    client.force_login(admin_user)
    assert client.post(reverse("runs:budgets"), {**FORM, "amount_usd": "0.01"}).status_code == 302
    Budget.objects.all().delete()
    response = client.post(reverse("runs:budgets"), FORM)
    assert response.status_code == 302
    budget = Budget.objects.get()
    assert (budget.agent, budget.period, budget.time_zone) == (
        "sql-analyst",
        "week",
        "Europe/Paris",
    )
    assert budget.amount_usd == Decimal("50") and budget.updated_by == admin_user


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"warn_percent": "100"}, "The thresholds must rise"),
        ({"amount_usd": "0"}, "greater than or equal to 0.01"),
        ({"time_zone": "Mars/Olympus"}, "Select a valid choice"),
        ({"agent": "nobody"}, "Select a valid choice"),
        ({"amount_usd": "lots"}, "Enter a number"),
    ],
)
def test_bad_input_is_a_form_error_and_nothing_is_saved(client, admin_user, change, message):
    client.force_login(admin_user)
    response = client.post(reverse("runs:budgets"), {**FORM, **change})
    assert response.status_code == 422
    assert message in response.content.decode()
    assert not Budget.objects.exists()


def test_a_second_budget_for_the_same_agent_and_period_is_a_form_error(client, admin_user):
    client.force_login(admin_user)
    client.post(reverse("runs:budgets"), FORM)
    response = client.post(reverse("runs:budgets"), {**FORM, "amount_usd": "9"})
    assert response.status_code == 422
    assert "This agent already has a budget for this period." in response.content.decode()
    assert Budget.objects.get().amount_usd == Decimal("50")


def test_only_admins_change_budgets(client, operator, approver):
    budget = Budget.objects.create(agent="sql-analyst", amount_usd=Decimal("5"))
    for user in (operator, approver):
        client.force_login(user)
        assert client.get(reverse("runs:budgets")).status_code == 200  # seen, not changed
        assert client.post(reverse("runs:budgets"), FORM).status_code == 403
        assert client.post(reverse("runs:budget_edit", args=[budget.pk]), FORM).status_code == 403
        assert client.post(reverse("runs:budget_delete", args=[budget.pk])).status_code == 403
    assert Budget.objects.get().amount_usd == Decimal("5")


def test_changing_a_budget_needs_the_csrf_token(admin_user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    assert client.post(reverse("runs:budgets"), FORM).status_code == 403
    assert not Budget.objects.exists()


def test_an_admin_edits_and_removes_a_budget(client, admin_user):
    budget = Budget.objects.create(agent="sql-analyst", amount_usd=Decimal("5"))
    client.force_login(admin_user)
    assert client.post(reverse("runs:budget_edit", args=[budget.pk]), FORM).status_code == 302
    assert Budget.objects.get().amount_usd == Decimal("50")
    assert client.post(reverse("runs:budget_delete", args=[budget.pk])).status_code == 302
    assert not Budget.objects.exists()


def test_the_dashboard_shows_a_gauge_per_budget_coloured_by_level(
    client, viewer, operator, no_enqueue
):
    Budget.objects.create(agent="sql-analyst", period="day", amount_usd=Decimal("10"))
    Budget.objects.create(agent="refund-desk", period="month", amount_usd=Decimal("100"))
    spend(operator, "8.5")
    client.force_login(viewer)
    page = client.get(reverse("runs:dashboard")).content.decode()
    assert 'id="dashboard-budgets"' in page
    assert 'class="budget-row level-warn" data-agent="sql-analyst"' in page
    assert "$8.50 / $10.00 <strong>85.0%</strong>" in page
    assert 'class="budget-row level-ok" data-agent="refund-desk"' in page
    assert '<meter min="0" max="120" low="80" high="100" optimum="0" value="85.0"' in page


def test_a_launch_past_the_stop_threshold_is_a_form_error(client, operator, no_enqueue):
    Budget.objects.create(agent="sql-analyst", period="day", amount_usd=Decimal("1"))
    spend(operator, "1.25")
    client.force_login(operator)
    response = client.post(
        reverse("runs:new"),
        {"agent": "sql-analyst", "question": "Revenue?", "report_to": "boss@example.com"},
    )
    assert response.status_code == 422
    assert "budget exceeded: sql-analyst has spent 1.25 of its 1.00 USD daily budget" in (
        response.content.decode()
    )
    assert Run.objects.filter(launched_by=operator).count() == 1  # the spending run only


def test_bad_input_on_the_edit_page_is_a_422_html_form_error(client, admin_user):
    """The edit page answered its form errors with 200 and `Content-Type: 422` (the status
    given where render() takes the content type): found by the type checker."""
    client.force_login(admin_user)
    client.post(reverse("runs:budgets"), FORM)
    budget = Budget.objects.get()
    response = client.post(
        reverse("runs:budget_edit", args=[budget.pk]), {**FORM, "warn_percent": "130"}
    )
    assert response.status_code == 422
    assert response["Content-Type"].startswith("text/html")
    assert "The thresholds must rise" in response.content.decode()
    budget.refresh_from_db()
    assert budget.warn_percent == 80
