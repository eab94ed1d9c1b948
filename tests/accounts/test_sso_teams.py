"""Single sign-on and teams (AGENTOPS_OIDC_TEAMS, accounts/sso.py): which of the provider's
groups make a person a member of which team with which powers, recomputed at each sign-in."""

import logging

import pytest
from django.core.exceptions import ImproperlyConfigured

from accounts import sso, teams
from accounts.models import Team, TeamAgent, TeamMember
from runs import events

TEAMS = "payments-ops:payments+launch,payments-approvers:payments+decide,audit:payments"


def mapping(teams_spec: str = TEAMS) -> sso.ClaimMapping:
    return sso.ClaimMapping.parse("groups", "agentops-approvers:approver", teams_spec)


def test_each_mapped_group_grants_its_team_and_powers_which_add_up():
    claims = {"groups": ["payments-ops", "payments-approvers", "agentops-approvers"]}
    assert mapping().teams_for(claims) == {"payments": {"launch", "decide"}}
    assert mapping().teams_for({"groups": ["audit"]}) == {"payments": set()}
    assert mapping().roles_for(claims) == {"approver"}  # roles as before


def test_a_claim_value_with_colons_maps_to_a_team():
    urn = mapping("urn:example:group:ops:payments+decide")
    assert urn.teams_for({"groups": ["urn:example:group:ops"]}) == {"payments": {"decide"}}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("ops:payments+approve", "unknown power 'approve'"),
        ("ops:Payments Team", "is not a team slug"),
        ("ops", "is not '<claim value>:<team>"),
    ],
)
def test_a_mistake_in_the_teams_mapping_is_named(spec, message):
    with pytest.raises(ValueError, match=message):
        mapping(spec)


def test_a_mistake_in_the_configured_teams_mapping_stops_start_up(settings):
    settings.AGENTOPS_SSO = {**settings.AGENTOPS_SSO, "TEAMS": "ops:payments+fly"}
    with pytest.raises(ImproperlyConfigured, match="AGENTOPS_OIDC_TEAMS: 'ops:payments\\+fly'"):
        sso.configured_mapping()


@pytest.fixture
def payments(db) -> Team:
    team = Team.objects.create(name="Payments", slug="payments")
    TeamAgent.objects.create(team=team, agent="refund-desk")
    return team


@pytest.mark.django_db
def test_sign_in_makes_the_mapped_memberships(approver, payments):
    assert not teams.may(approver, "decide", "refund-desk")  # read, and cached on the object
    joined, left = sso.sync_teams(approver, {"payments": {"decide"}})
    assert (joined, left) == ({"payments"}, set())
    member = TeamMember.objects.get(user=approver)
    assert member.from_sso and member.decide and not member.launch
    # The same user object answers with the new membership.
    assert teams.may(approver, "decide", "refund-desk")


@pytest.mark.django_db
def test_the_next_sign_in_changes_or_removes_what_the_mapping_made(approver, payments):
    sso.sync_teams(approver, {"payments": {"decide"}})
    assert sso.sync_teams(approver, {"payments": {"launch"}}) == ({"payments"}, set())
    member = TeamMember.objects.get(user=approver)
    assert member.launch and not member.decide
    assert sso.sync_teams(approver, {}) == (set(), {"payments"})
    assert not TeamMember.objects.exists()
    assert not teams.may(approver, "view", "refund-desk")


@pytest.mark.django_db
def test_a_membership_an_admin_made_is_left_alone(approver, payments):
    TeamMember.objects.create(team=payments, user=approver, decide=True, administer=True)
    assert sso.sync_teams(approver, {}) == (set(), set())
    assert sso.sync_teams(approver, {"payments": set()}) == (set(), set())
    member = TeamMember.objects.get(user=approver)
    assert not member.from_sso and member.decide and member.administer


@pytest.mark.django_db
def test_a_team_that_does_not_exist_is_skipped_and_logged(approver, caplog):
    with caplog.at_level(logging.WARNING, logger="agentops.security"):
        assert sso.sync_teams(approver, {"nowhere": {"decide"}}) == (set(), set())
    assert "'nowhere', which does not exist" in caplog.text
    assert not TeamMember.objects.exists()


@pytest.mark.django_db
def test_leaving_a_team_at_the_provider_tells_the_users_sockets(
    approver, payments, monkeypatch, django_capture_on_commit_callbacks
):
    sso.sync_teams(approver, {"payments": {"decide"}})
    told: list = []
    monkeypatch.setattr(events, "send", lambda group, message, **kw: told.append((group, message)))
    with django_capture_on_commit_callbacks(execute=True):
        sso.sync_teams(approver, {})
    assert (events.user_group(approver.pk), {"type": "access.changed"}) in told
