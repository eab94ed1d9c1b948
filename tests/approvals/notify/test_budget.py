"""A budget threshold crossed is sent to approvers and admins by e-mail and to the signed
webhooks (approvals/notify/budget.py), once per crossing."""

import json
from decimal import Decimal

import pytest
from django.core import mail
from django.utils import timezone
from standardwebhooks import Webhook

from accounts.models import Team, TeamAgent, TeamMember
from approvals import tasks
from approvals.engine_gates import budget_crossed
from approvals.notify.budget import payload
from runs.models import Budget, BudgetCrossing
from tests.conftest import make_user
from tests.runs.factories import make_run

from .test_notify import PUBLIC, SECRET, Endpoint, configure

pytestmark = pytest.mark.django_db


@pytest.fixture
def crossing(operator, no_enqueue) -> BudgetCrossing:
    budget = Budget.objects.create(agent="sql-analyst", period="week", amount_usd=Decimal("50"))
    return BudgetCrossing.objects.create(
        budget=budget,
        period_start=timezone.now(),
        threshold="warn",
        spent_usd=Decimal("41.5"),
        run=make_run(operator),
    )


def test_the_crossing_is_e_mailed_to_approvers_and_admins(
    settings, crossing, approver, admin_user, operator
):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    approver.email, operator.email = "arthur@example.com", "olivia@example.com"
    approver.save()
    operator.save()
    assert tasks.send_budget_email(crossing.pk) == 1
    (message,) = mail.outbox
    # Approvers and admins; an operator is not told.
    assert "arthur@example.com" in message.bcc and "olivia@example.com" not in message.bcc
    assert message.subject == (
        "[agentops] Budget of sql-analyst is nearly spent (41.50 of 50.00 USD this week)"
    )
    assert str(crossing.run_id) in message.body


@pytest.fixture
def hook():
    receiver = Endpoint()
    yield receiver
    receiver.close()


def test_the_crossing_is_posted_signed_to_the_webhooks(settings, hook, eager, crossing):
    configure(settings, hook.url)
    assert tasks.notify_budget_crossed(crossing.pk) == 1
    (request,) = hook.requests
    data = Webhook(SECRET.encode()).verify(request["body"], request["headers"])
    assert data["event"] == "budget.threshold_crossed"
    assert (data["agent"], data["threshold"], data["spent_usd"]) == (
        "sql-analyst",
        "warn",
        "41.500000",
    )
    assert data["links"]["budgets"] == f"{PUBLIC}/budgets/"
    assert json.loads(request["body"])["run"] == str(crossing.run_id)


def test_the_engine_queues_the_notifications_after_commit(
    crossing, django_capture_on_commit_callbacks, monkeypatch
):
    queued = []
    monkeypatch.setattr(tasks.notify_budget_crossed, "delay", queued.append)
    with django_capture_on_commit_callbacks(execute=True):
        budget_crossed(crossing.run, crossing.pk)
        assert queued == []
    assert queued == [crossing.pk]


def test_a_teams_crossing_goes_to_admins_and_the_teams_deciders(
    settings, operator, approver, admin_user, django_user_model, no_enqueue
):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    team = Team.objects.create(name="Ops", slug="ops")
    TeamAgent.objects.create(team=team, agent="sql-analyst")
    outsider = make_user(django_user_model, "oscar", "approver")
    for user, address in ((approver, "arthur"), (admin_user, "ada"), (outsider, "oscar")):
        user.email = f"{address}@example.com"
        user.save()
    TeamMember.objects.create(team=team, user=approver, decide=True)
    budget = Budget.objects.create(team=team, period="day", amount_usd=Decimal("10"))
    crossing = BudgetCrossing.objects.create(
        budget=budget,
        period_start=timezone.now(),
        threshold="stop",
        spent_usd=Decimal("12.5"),
        run=make_run(operator),
    )
    assert tasks.send_budget_email(crossing.pk) == 1
    (message,) = mail.outbox
    # The team's decider and the admin; an approver outside the team is not told.
    assert sorted(message.bcc) == ["ada@example.com", "arthur@example.com"]
    assert message.subject.startswith("[agentops] Budget of team Ops is overspent")
    assert payload(crossing)["team"] == "ops" and payload(crossing)["agent"] == ""


def test_a_teams_crossing_is_posted_to_the_teams_own_webhook(
    settings, hook, eager, operator, no_enqueue
):
    configure(settings, hook.url)
    settings.AGENTOPS = {**settings.AGENTOPS, "WEBHOOK_URLS": []}
    team = Team.objects.create(name="Ops", slug="ops", webhook_url=hook.url)
    budget = Budget.objects.create(team=team, period="day", amount_usd=Decimal("10"))
    crossing = BudgetCrossing.objects.create(
        budget=budget,
        period_start=timezone.now(),
        threshold="warn",
        spent_usd=Decimal("8.5"),
        run=make_run(operator),
    )
    assert tasks.notify_budget_crossed(crossing.pk) == 1
    (request,) = hook.requests
    data = Webhook(SECRET.encode()).verify(request["body"], request["headers"])
    assert (data["team"], data["agent"], data["threshold"]) == ("ops", "", "warn")
    assert data["text"] == "Budget of team Ops is nearly spent (8.50 of 10.00 USD this day)"


def test_the_crossing_is_posted_as_every_webhook_is(settings, hook, eager, crossing):
    """Through the wing's one POST (webhooks.post_signed): while the legacy signatures are on,
    the delivery id goes beside them, as on an approval's webhook."""
    configure(settings, hook.url)
    settings.AGENTOPS = {**settings.AGENTOPS, "WEBHOOK_LEGACY_SIGNATURES": True}
    assert tasks.notify_budget_crossed(crossing.pk) == 1
    (request,) = hook.requests
    headers = {name.lower(): value for name, value in request["headers"].items()}
    assert headers["webhook-id"] == f"budget-{crossing.pk}"
    assert headers["x-agentops-delivery"] == headers["webhook-id"]
    assert headers["x-agentops-signature"].startswith("sha256=")
