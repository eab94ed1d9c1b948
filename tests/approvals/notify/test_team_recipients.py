"""Notifications follow the teams (accounts/teams.py): the e-mail and escalation tiers reach
only the agent's deciders, a team's own webhook and Slack channel get its agents' approvals,
and a Slack press by someone outside the team decides nothing."""

from datetime import timedelta

import pytest
from django.core import mail

from accounts.models import Team, TeamAgent, TeamMember
from approvals import tasks
from approvals.models import Approval
from approvals.notify import escalation
from approvals.notify.slack import app as slack
from tests.conftest import make_user

from ..conftest import gated
from .test_notify import Endpoint, configure, gate_a_run
from .test_slack import SECRET, FakeSlack, assert_pending, link, press, report


@pytest.fixture
def fake(settings):
    """test_slack's fake Slack (its fixture, for this module)."""
    fake = FakeSlack()
    settings.AGENTOPS = {
        **settings.AGENTOPS,
        "SLACK_BOT_TOKEN": "xoxb-test",
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_CHANNEL": "C123",
        "SLACK_API_URL": fake.url + "/api/",
        "SLACK_MAP_BY_EMAIL": False,
    }
    yield fake
    fake.close()


@pytest.fixture
def endpoints():
    made = [Endpoint(), Endpoint()]
    yield made
    for e in made:
        e.close()


def team(slug: str, agent: str, **fields) -> Team:
    made = Team.objects.create(name=slug.title(), slug=slug, **fields)
    TeamAgent.objects.create(team=made, agent=agent)
    return made


def approver_with_mail(django_user_model, name: str):
    user = make_user(django_user_model, name, "approver")
    user.email = f"{name}@example.com"
    user.save()
    return user


@pytest.mark.django_db(transaction=True)
def test_the_email_goes_only_to_the_agent_s_deciders(
    settings, eager, operator, django_user_model, no_enqueue
):
    configure(settings, email=True)
    ann = approver_with_mail(django_user_model, "ann")
    bob = approver_with_mail(django_user_model, "bob")
    approver_with_mail(django_user_model, "cy")  # in the team, without decide
    analysts = team("analysts", "sql-analyst")
    TeamMember.objects.create(team=analysts, user=ann, decide=True)
    TeamMember.objects.create(team=analysts, user=django_user_model.objects.get(username="cy"))
    TeamMember.objects.create(team=team("payments", "refund-desk"), user=bob, decide=True)
    gate_a_run(operator)  # sql-analyst's approval
    assert [m.to for m in mail.outbox] == [["ann@example.com"]]


@pytest.mark.django_db(transaction=True)
def test_a_team_s_own_webhook_gets_its_agents_approvals_only(
    settings, endpoints, eager, operator, no_enqueue
):
    mine, theirs = endpoints
    configure(settings)  # no installation-wide webhook
    team("analysts", "sql-analyst", webhook_url=mine.url)
    team("payments", "refund-desk", webhook_url=theirs.url)
    _, approval = gate_a_run(operator)
    assert len(mine.requests) == 1 and b'"sql-analyst"' in mine.requests[0]["body"]
    assert theirs.requests == []
    assert str(approval.pk).encode() in mine.requests[0]["body"]
    # Its reminders go where the request went.
    tasks.approval_reminded(str(approval.pk), "expiry:0.5")
    assert len(mine.requests) == 2 and b'"approval.reminder"' in mine.requests[1]["body"]
    assert theirs.requests == []


@pytest.mark.django_db
def test_a_team_s_slack_channel_gets_its_agents_approvals(fake, operator, no_enqueue):
    team("analysts", "sql-analyst", slack_channel="CANALYSTS")
    _, approval = report(operator)
    slack.post_request(str(approval.pk))
    (posted,) = fake.called("/api/chat.postMessage")
    assert posted["channel"] == "CANALYSTS"


@pytest.mark.django_db
def test_a_slack_press_from_outside_the_team_decides_nothing(fake, operator, approver, no_enqueue):
    analysts = team("analysts", "sql-analyst")
    TeamMember.objects.create(team=team("payments", "refund-desk"), user=approver, decide=True)
    run, approval = report(operator)
    link(approver)
    seq = run.last_seq
    press(fake, approval, "reject")
    assert_pending(run, approval, seq)
    # In the team, with decide, the same press decides.
    TeamMember.objects.create(team=analysts, user=approver, decide=True)
    press(fake, approval, "reject")
    approval.refresh_from_db()
    assert approval.status == Approval.Status.REJECTED


@pytest.mark.django_db
def test_an_escalation_tier_reaches_only_people_whose_teams_decide(
    operator, django_user_model, admin_user, no_enqueue
):
    carl = make_user(django_user_model, "carl", "approver")
    dora = make_user(django_user_model, "dora", "approver")
    chain = [{"after_seconds": 60, "users": ["carl", "dora"], "roles": []}]
    run, approval = gated(
        "test-payer", {"to": "initech", "amount": "900.00"}, by=operator, escalation=chain
    )
    TeamMember.objects.create(team=team("payers", run.agent), user=carl, decide=True)
    assert dora.pk  # an approver, in no team that owns the agent
    escalation.escalate_due(lambda *a: None, now=approval.requested_at + timedelta(minutes=2))
    assert list(approval.escalations.values_list("notified", flat=True)) == [["carl"]]
