"""The decisions export and approver statistics by team: a team's administrators get their
teams' agents' records only, admins may narrow to a team, and a team filter that names no team
the person may pick is a clear 400 / 422."""

import io
import json

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.models import ApiToken, Team, TeamAgent, TeamMember
from approvals import decisions
from approvals.evidence import chain as evidence_chain
from approvals.evidence import export as evidence_export
from tests.conftest import make_user

from .conftest import gated

pytestmark = pytest.mark.django_db

EXPORT = reverse("approvals:decisions_export")
EXPORT_API = "/api/approvals/export"
STATS = reverse("approvals:stats")
STATS_API = "/api/approvals/stats"
TRANSFER = {"to": "initech", "amount": "900.00"}
WIPE = {"to": "staging", "amount": "1"}


@pytest.fixture
def two_teams(approver, no_enqueue, django_user_model):
    """A decided call of each of two agents, then team Alpha owning the payer and team Bravo
    the wiper; Alpha's administrator (a viewer by role) and a member of Alpha who does not
    administer it (an approver by role)."""
    payer_run, payer = gated("test-payer", TRANSFER)
    wiper_run, wiper = gated("test-wiper", WIPE)
    for approval in (payer, wiper):
        decisions.decide(approval.pk, user=approver, decision="reject", reason="no")
    alpha = Team.objects.create(name="Alpha", slug="alpha")
    bravo = Team.objects.create(name="Bravo", slug="bravo")
    TeamAgent.objects.create(team=alpha, agent="test-payer")
    TeamAgent.objects.create(team=bravo, agent="test-wiper")
    keeper = make_user(django_user_model, "alpha-keeper", "viewer")
    TeamMember.objects.create(team=alpha, user=keeper, administer=True)
    member = make_user(django_user_model, "alpha-member", "approver")
    TeamMember.objects.create(team=alpha, user=member, decide=True)
    return {
        "keeper": keeper,
        "member": member,
        "payer": payer,
        "wiper": wiper,
        "payer_run": payer_run,
        "wiper_run": wiper_run,
    }


def _browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _token(user) -> Client:
    _, raw = ApiToken.issue(user, "tests")
    return Client(headers={"Authorization": f"Bearer {raw}"})


def _today() -> dict:
    today = timezone.now().date().isoformat()
    return {"since": today, "until": today}


def _lines(response) -> list[dict]:
    assert response.status_code == 200, response.content
    text = b"".join(response.streaming_content).decode()
    assert evidence_chain.verify(text, key=evidence_export.signing_key()).ok
    return [json.loads(line) for line in text.split("\n") if line]


def _agents(lines: list[dict]) -> set[str]:
    return {line["agent"] for line in lines if line["line"] == "decision"}


# --- the export --------------------------------------------------------------------------------
def test_a_team_s_administrator_exports_their_team_s_decisions_only(two_teams):
    keeper = two_teams["keeper"]
    page = _browser(keeper).get(EXPORT)
    assert page.status_code == 200
    html = page.content.decode()
    # The form offers their team and their agents, not Bravo's.
    assert 'value="alpha"' in html and 'value="bravo"' not in html
    assert 'value="test-payer"' in html and 'value="test-wiper"' not in html
    for response in (
        _browser(keeper).get(EXPORT, {**_today(), "format": "jsonl", "download": "1"}),
        _token(keeper).get(EXPORT_API, _today()),
    ):
        lines = _lines(response)
        assert _agents(lines) == {"test-payer"}
        assert str(two_teams["wiper"].pk) not in json.dumps(lines)
        # The signed header says whose decisions the file holds.
        assert (lines[0]["team"], lines[0]["agents"]) == ("", ["test-payer"])


@pytest.mark.parametrize(
    ("params", "said"),
    [
        ({"team": "bravo"}, "no team 'bravo' among the teams where you may administer"),
        ({"team": "nope"}, "no team 'nope' among the teams where you may administer"),
        ({"agent": "test-wiper"}, "agent 'test-wiper' is not one of the agents of your teams"),
        ({"team": "alpha", "agent": "test-wiper"}, "not one of the agents of team 'alpha'"),
    ],
)
def test_a_team_s_administrator_cannot_reach_another_team_s_decisions(two_teams, params, said):
    keeper = two_teams["keeper"]
    page = _browser(keeper).get(EXPORT, {**_today(), **params, "download": "1"})
    assert page.status_code == 400 and said in page.content.decode().replace("&#x27;", "'")
    api = _token(keeper).get(EXPORT_API, {**_today(), **params})
    assert api.status_code == 400 and said in api.json()["detail"]


def test_an_admin_narrows_the_export_to_a_team(two_teams, admin_user):
    for response in (
        _browser(admin_user).get(
            EXPORT, {**_today(), "team": "bravo", "format": "jsonl", "download": "1"}
        ),
        _token(admin_user).get(EXPORT_API, {**_today(), "team": "bravo"}),
    ):
        assert "decisions-bravo-" in response["Content-Disposition"]
        lines = _lines(response)
        assert _agents(lines) == {"test-wiper"}
        assert (lines[0]["team"], lines[0]["agents"]) == ("bravo", ["test-wiper"])
    everything = _lines(_token(admin_user).get(EXPORT_API, _today()))
    assert _agents(everything) == {"test-payer", "test-wiper"}
    assert (everything[0]["team"], everything[0]["agents"]) == ("", None)
    # Both teams are offered on the page.
    html = _browser(admin_user).get(EXPORT).content.decode()
    assert 'value="alpha"' in html and 'value="bravo"' in html


def test_an_unknown_team_is_a_clear_error_for_an_admin_too(two_teams, admin_user):
    params = {**_today(), "team": "<b>nope", "download": "1"}
    page = _browser(admin_user).get(EXPORT, params)
    assert page.status_code == 400
    assert "no team has the slug" in page.content.decode()
    assert b"<b>nope" not in page.content  # escaped where shown
    api = _token(admin_user).get(EXPORT_API, {**_today(), "team": "nope"})
    assert api.status_code == 400 and "no team has the slug 'nope'" in api.json()["detail"]


def test_a_member_who_does_not_administer_gets_neither(two_teams):
    member = two_teams["member"]
    assert _browser(member).get(EXPORT).status_code == 403
    assert _token(member).get(EXPORT_API, _today()).status_code == 403
    assert _browser(member).get(STATS).status_code == 403
    assert _token(member).get(STATS_API).status_code == 403
    audit = _browser(member).get(reverse("runs:audit")).content.decode()
    assert EXPORT not in audit and STATS not in audit


def test_the_export_command_takes_a_team(two_teams):
    out = io.StringIO()
    call_command("export_decisions", **_today(), team="bravo", stdout=out)
    lines = [json.loads(line) for line in out.getvalue().split("\n") if line]
    assert _agents(lines) == {"test-wiper"}
    assert (lines[0]["team"], lines[0]["agents"]) == ("bravo", ["test-wiper"])
    with pytest.raises(CommandError, match="no team has the slug 'nope'"):
        call_command("export_decisions", **_today(), team="nope", stdout=io.StringIO())


# --- approver statistics -----------------------------------------------------------------------
def _tools(body: dict) -> set[str]:
    return {row["tool"] for row in body["tools"]}


def test_a_team_s_administrator_sees_their_team_s_statistics_only(two_teams):
    keeper = two_teams["keeper"]
    body = _token(keeper).get(STATS_API).json()
    assert _tools(body) == {"test_transfer"}
    assert [row["decisions"] for row in body["approvers"]] == [1]
    page = _browser(keeper).get(STATS)
    assert page.status_code == 200
    html = page.content.decode()
    assert "test_transfer" in html and "test_wipe" not in html
    assert 'value="alpha"' in html and 'value="bravo"' not in html
    # The audit page leads them there.
    audit = _browser(keeper).get(reverse("runs:audit")).content.decode()
    assert STATS in audit and EXPORT in audit
    refused = _token(keeper).get(STATS_API, {"team": "bravo"})
    assert refused.status_code == 422 and "bravo" in refused.json()["errors"]["team"][0]
    page = _browser(keeper).get(STATS, {"team": "bravo"})
    assert page.status_code == 400 and "test_transfer" not in page.content.decode()


def test_an_admin_narrows_the_statistics_to_a_team(two_teams, admin_user):
    client = _token(admin_user)
    assert _tools(client.get(STATS_API).json()) == {"test_transfer", "test_wipe"}
    assert _tools(client.get(STATS_API, {"team": "bravo"}).json()) == {"test_wipe"}
    html = _browser(admin_user).get(STATS, {"team": "alpha"}).content.decode()
    assert "test_transfer" in html and "test_wipe" not in html
    unknown = client.get(STATS_API, {"team": "nope"})
    assert unknown.status_code == 422
    assert unknown.json()["errors"]["team"] == ["no team has the slug 'nope'"]
    page = _browser(admin_user).get(STATS, {"team": "nope"})
    assert page.status_code == 400 and "no team has the slug" in page.content.decode()
