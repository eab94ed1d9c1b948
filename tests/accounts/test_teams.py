"""The team rule (accounts/teams.py): which agents a user reaches, and for what."""

import pytest
from django.contrib.auth.models import AnonymousUser

from accounts import teams
from accounts.models import Team, TeamAgent, TeamMember
from accounts.teams import Power
from runs.models import Run
from tests.conftest import make_user

pytestmark = pytest.mark.django_db


def team(slug: str, *agents: str) -> Team:
    made = Team.objects.create(name=slug.title(), slug=slug)
    TeamAgent.objects.bulk_create([TeamAgent(team=made, agent=a) for a in agents])
    return made


def join(user, team: Team, **powers) -> TeamMember:
    teams.forget(user)
    return TeamMember.objects.create(team=team, user=user, **powers)


def run_of(agent: str) -> Run:
    return Run.objects.create(
        agent=agent,
        agent_config={},
        input={},
        max_steps=1,
        max_cost_usd=1,
        max_seconds=1,
        max_consecutive_errors=1,
    )


def test_an_agent_in_no_team_is_reached_through_the_global_roles(django_user_model):
    viewer = make_user(django_user_model, "vic", "viewer")
    operator = make_user(django_user_model, "oz", "operator")
    team("payments", "refund-desk")
    assert teams.may(viewer, Power.VIEW, "sql-analyst")
    assert not teams.may(viewer, Power.LAUNCH, "sql-analyst")
    assert teams.may(operator, Power.LAUNCH, "sql-analyst")
    # Administering an agent no team owns stays with the global admins.
    assert not teams.may(operator, Power.ADMINISTER, "sql-analyst")


def test_a_team_member_reaches_their_teams_agents_and_no_other_team_s(django_user_model):
    approver = make_user(django_user_model, "ann", "approver")
    payments, support = team("payments", "refund-desk"), team("support", "sql-analyst")
    join(approver, payments, decide=True)
    assert teams.may(approver, Power.DECIDE, "refund-desk")
    assert not teams.may(approver, Power.VIEW, "sql-analyst")
    assert not teams.may(approver, Power.DECIDE, "sql-analyst")
    assert teams.may(approver, Power.VIEW, "demo-unowned")  # nobody's: the role decides
    assert support.members.count() == 0


def test_a_team_narrows_a_role_and_never_widens_it(django_user_model):
    viewer = make_user(django_user_model, "val", "viewer")
    approver = make_user(django_user_model, "abe", "approver")
    payments = team("payments", "refund-desk")
    # Every flag on, but only the viewer role: a viewer still only views.
    join(viewer, payments, launch=True, decide=True)
    assert teams.may(viewer, Power.VIEW, "refund-desk")
    assert not teams.may(viewer, Power.LAUNCH, "refund-desk")
    assert not teams.may(viewer, Power.DECIDE, "refund-desk")
    # An approver in the team without `decide` views and does not decide there.
    join(approver, payments)
    assert teams.may(approver, Power.VIEW, "refund-desk")
    assert not teams.may(approver, Power.DECIDE, "refund-desk")


def test_administer_is_the_team_s_own_grant(django_user_model):
    viewer = make_user(django_user_model, "wes", "viewer")
    join(viewer, team("payments", "refund-desk"), administer=True)
    assert teams.may(viewer, Power.ADMINISTER, "refund-desk")
    assert not teams.may(viewer, Power.ADMINISTER, "sql-analyst")


def test_global_admins_and_superusers_reach_every_agent(django_user_model):
    admin = make_user(django_user_model, "ada", "admin")
    root = django_user_model.objects.create(username="root", is_superuser=True)
    team("payments", "refund-desk")
    for user in (admin, root):
        for power in Power:
            assert teams.may(user, power, "refund-desk"), (user, power)


def test_inactive_and_anonymous_users_reach_nothing(django_user_model):
    gone = make_user(django_user_model, "gone", "admin")
    gone.is_active = False
    assert teams.scope(gone, Power.VIEW).nothing
    assert teams.scope(AnonymousUser(), Power.VIEW).nothing
    assert teams.scope("", Power.VIEW).nothing  # a template rendered for no one


def test_run_and_approval_querysets_follow_the_rule(django_user_model):
    operator = make_user(django_user_model, "otis", "operator")
    join(operator, team("payments", "refund-desk"))  # a member who may only view
    team("support", "sql-analyst")
    mine, nobodys = run_of("refund-desk"), run_of("free-agent")
    run_of("sql-analyst")  # support's: not seen
    assert set(Run.objects.visible_to(operator)) == {mine, nobodys}
    # Without `launch` in payments, only the unowned agent's run is theirs to operate.
    assert set(Run.objects.operable_by(operator)) == {nobodys}


def test_the_scope_is_read_in_one_query_per_user(django_user_model, django_assert_num_queries):
    approver = make_user(django_user_model, "ira", "approver")
    assert approver.can_view  # the roles are read (and cached) first
    join(approver, team("payments", "refund-desk"), decide=True)
    with django_assert_num_queries(1):
        for power in Power:
            teams.scope(approver, power)


def test_members_reaching_picks_the_deciders_of_an_owned_agent(django_user_model):
    ann = make_user(django_user_model, "ann", "approver")
    bob = make_user(django_user_model, "bob", "approver")
    ada = make_user(django_user_model, "ada", "admin")
    join(ann, team("payments", "refund-desk"), decide=True)
    join(bob, team("support", "sql-analyst"), decide=True)
    users = django_user_model.objects.all()
    assert set(teams.members_reaching(users, Power.DECIDE, "refund-desk")) == {ann, ada}
    # An agent no team owns: everyone (their roles decide, as before).
    assert set(teams.members_reaching(users, Power.DECIDE, "free-agent")) == {ann, bob, ada}


def test_known_agents_lists_the_catalogue_and_what_teams_name(django_user_model):
    team("payments", "retired-agent")
    known = teams.known_agents()
    assert "sql-analyst" in known and "retired-agent" in known
