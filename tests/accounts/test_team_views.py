"""The Teams page (accounts/team_views.py) and the Django admin's teams."""

import pytest
from django.urls import reverse

from accounts import teams
from accounts.models import Team, TeamAgent, TeamMember
from tests.conftest import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(django_user_model):
    return make_user(django_user_model, "adele", "admin")


def team_post(**extra) -> dict:
    data = {
        "name": "Payments",
        "slug": "payments",
        "agents": ["refund-desk"],
        "webhook_url": "",
        "slack_channel": "",
        "members-TOTAL_FORMS": "0",
        "members-INITIAL_FORMS": "0",
    }
    return {**data, **extra}


def member(i: int, username: str, **flags) -> dict:
    fields = {f"members-{i}-user": username}
    fields.update({f"members-{i}-{k}": "on" for k, v in flags.items() if v})
    return fields


def test_it_requires_the_admin_role(client, approver):
    client.force_login(approver)
    assert client.get(reverse("teams:list")).status_code == 403
    assert client.post(reverse("teams:new"), team_post()).status_code == 403
    assert not Team.objects.exists()


def test_an_admin_makes_a_team_with_agents_and_members(client, admin, approver, operator):
    client.force_login(admin)
    assert "sql-analyst" in client.get(reverse("teams:new")).content.decode()
    data = team_post(
        **{"members-TOTAL_FORMS": "2"},
        **member(0, approver.username, decide=True),
        **member(1, operator.username, launch=True),
    )
    response = client.post(reverse("teams:new"), data)
    team = Team.objects.get(slug="payments")
    assert response.status_code == 302 and response["Location"] == reverse(
        "teams:edit", args=[team.pk]
    )
    assert team.agent_slugs == ["refund-desk"]
    assert {(m.user.username, m.launch, m.decide) for m in team.members.all()} == {
        (approver.username, False, True),
        (operator.username, True, False),
    }
    # The rule follows it (sql-analyst, owned by no team, stays with the roles).
    assert teams.may(approver, "decide", "refund-desk")
    assert not teams.may(operator, "decide", "refund-desk")
    page = client.get(reverse("teams:list")).content.decode()
    assert 'data-team="payments"' in page and "sql-analyst" in page  # listed as unowned


def test_editing_replaces_the_agents_and_removes_members(client, admin, approver):
    team = Team.objects.create(name="Payments", slug="payments")
    TeamAgent.objects.create(team=team, agent="refund-desk")
    kept = TeamMember.objects.create(team=team, user=approver, decide=True)
    client.force_login(admin)
    data = team_post(
        agents=["sql-analyst"],
        **{"members-TOTAL_FORMS": "1", "members-INITIAL_FORMS": "1"},
        **member(0, approver.username, decide=True),
        **{"members-0-id": str(kept.pk), "members-0-DELETE": "on"},
    )
    response = client.post(reverse("teams:edit", args=[team.pk]), data)
    assert response.status_code == 302
    assert team.agent_slugs == ["sql-analyst"]
    assert not TeamMember.objects.exists()


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"slug": "not a slug"}, "slug"),
        ({"agents": ["no-such-agent"]}, "no-such-agent is not one of the available choices"),
        ({"webhook_url": "ftp://x"}, "Enter a valid URL"),
    ],
)
def test_bad_input_is_a_form_error_and_saves_nothing(client, admin, change, error):
    client.force_login(admin)
    response = client.post(reverse("teams:new"), team_post(**change))
    assert response.status_code == 422
    assert error in response.content.decode()
    assert not Team.objects.exists()


def test_the_same_member_twice_is_a_form_error(client, admin, approver):
    client.force_login(admin)
    data = team_post(
        **{"members-TOTAL_FORMS": "2"},
        **member(0, approver.username, decide=True),
        **member(1, approver.username),
    )
    response = client.post(reverse("teams:new"), data)
    assert response.status_code == 422
    assert "Please correct the duplicate data" in response.content.decode()
    assert not Team.objects.exists() and not TeamMember.objects.exists()


def test_an_unknown_user_is_a_form_error(client, admin):
    client.force_login(admin)
    data = team_post(**{"members-TOTAL_FORMS": "1"}, **member(0, "nobody-here"))
    response = client.post(reverse("teams:new"), data)
    assert response.status_code == 422
    assert not Team.objects.exists()


def test_deleting_a_team_gives_its_agents_back_to_the_roles(client, admin, viewer):
    team = Team.objects.create(name="Payments", slug="payments")
    TeamAgent.objects.create(team=team, agent="refund-desk")
    assert not teams.may(viewer, "view", "refund-desk")
    client.force_login(admin)
    assert client.post(reverse("teams:delete", args=[team.pk])).status_code == 302
    assert not Team.objects.exists()
    teams.forget(viewer)
    assert teams.may(viewer, "view", "refund-desk")


def test_the_django_admin_edits_teams_too(client, django_user_model):
    root = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(root)
    team = Team.objects.create(name="Payments", slug="payments")
    TeamAgent.objects.create(team=team, agent="refund-desk")
    listing = client.get(reverse("admin:accounts_team_changelist")).content.decode()
    assert "Payments" in listing and "refund-desk" in listing
    assert client.get(reverse("admin:accounts_team_change", args=[team.pk])).status_code == 200
