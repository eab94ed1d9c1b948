"""The live streams and teams (accounts/teams.py): a member of team Bravo cannot watch team
Alpha's run, is not sent Alpha's runs on the dashboard stream nor Alpha's approvals on the
approvals stream, and a socket closes when its user leaves the team that owned the run."""

from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.db import transaction
from django.utils import timezone

from accounts.models import Team, TeamAgent, TeamMember
from approvals.models import Approval
from runs import consumers, events
from runs.models import Run
from tests.conftest import make_user

from .factories import make_run
from .test_consumers import connect, receive_until, refused
from .test_revocation import login, receive_close, watch

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


@sync_to_async
def teams_world(django_user_model) -> dict:
    """Alpha owns sql-analyst, Bravo refund-desk; one viewer in each."""
    alpha = Team.objects.create(name="Alpha", slug="alpha")
    bravo = Team.objects.create(name="Bravo", slug="bravo")
    TeamAgent.objects.create(team=alpha, agent="sql-analyst")
    TeamAgent.objects.create(team=bravo, agent="refund-desk")
    ann = make_user(django_user_model, "ann", "viewer")
    bob = make_user(django_user_model, "bob", "viewer")
    TeamMember.objects.create(team=alpha, user=ann)
    TeamMember.objects.create(team=bravo, user=bob)
    return {"alpha": alpha, "ann": ann, "bob": bob}


@sync_to_async
def pending_question(run: Run) -> Approval:
    return Approval.objects.create(
        run=run,
        gate_seq=1,
        llm_seq=1,
        kind=Approval.Kind.QUESTION,
        tool="ask_operator",
        question="Which region?",
        explanation="the agent asked",
        expires_at=timezone.now() + timedelta(hours=1),
    )


async def test_another_team_s_run_cannot_be_watched(django_user_model, operator, no_enqueue):
    world = await teams_world(django_user_model)
    run = await sync_to_async(make_run)(operator)  # sql-analyst: Alpha's
    assert await refused(f"/ws/runs/{run.pk}/", world["bob"])
    communicator, connected = await connect(f"/ws/runs/{run.pk}/", world["ann"])
    assert connected
    await communicator.disconnect()


async def test_the_dashboard_stream_leaves_another_team_s_runs_out(
    django_user_model, operator, no_enqueue
):
    world = await teams_world(django_user_model)
    communicator, connected = await connect("/ws/runs/?format=json", world["bob"])
    assert connected
    alpha_run = await sync_to_async(make_run)(operator)  # sql-analyst
    bravo_run = await sync_to_async(make_run)(operator, agent="refund-desk")
    messages = await receive_until(communicator, lambda m: str(bravo_run.pk) in m)
    assert not [m for m in messages if str(alpha_run.pk) in m]
    await communicator.disconnect()


async def test_the_approvals_stream_shows_only_the_team_s_approvals(
    django_user_model, operator, no_enqueue
):
    world = await teams_world(django_user_model)
    alpha_run = await sync_to_async(make_run)(operator, status=Run.Status.WAITING)
    alpha = await pending_question(alpha_run)
    # Watching Alpha's approval by its id gets nothing of it either.
    communicator, connected = await connect(f"/ws/approvals/?approval={alpha.pk}", world["bob"])
    assert connected
    first = await communicator.receive_from(timeout=5)
    assert '<span id="nav-pending-count" class="count" hx-swap-oob="true">0</span>' in first
    bravo_run = await sync_to_async(make_run)(
        operator, agent="refund-desk", status=Run.Status.WAITING
    )
    bravo = await pending_question(bravo_run)
    await sync_to_async(events.publish_approval)(bravo.pk)
    messages = await receive_until(communicator, lambda m: str(bravo.pk) in m)
    assert not [m for m in [first, *messages] if str(alpha.pk) in m]
    await communicator.disconnect()


@pytest.fixture
def announced_only(monkeypatch):
    """The periodic re-check out of the way: what closes the socket is the announcement."""
    monkeypatch.setattr(consumers, "ACCESS_CHECK_SECONDS", 3600)


@pytest.mark.usefixtures("announced_only")
async def test_leaving_the_team_closes_the_run_socket(django_user_model, operator, no_enqueue):
    world = await teams_world(django_user_model)
    run = await sync_to_async(make_run)(operator)
    watcher = await watch(f"/ws/runs/{run.pk}/?after=99", await login(world["ann"]))
    await sync_to_async(TeamMember.objects.filter(user=world["ann"]).delete)()
    assert (await receive_close(watcher))["code"] == 4403


@sync_to_async
def move_agent(agent: str, to: str) -> None:
    # In one transaction, as the Teams page saves: the members told re-check after both.
    with transaction.atomic():
        TeamAgent.objects.filter(agent=agent).delete()
        TeamAgent.objects.create(team=Team.objects.get(slug=to), agent=agent)


@pytest.mark.usefixtures("announced_only")
async def test_an_agent_moved_to_another_team_closes_its_old_team_s_sockets(
    django_user_model, operator, no_enqueue
):
    world = await teams_world(django_user_model)
    run = await sync_to_async(make_run)(operator)
    watcher = await watch(f"/ws/runs/{run.pk}/?after=99", await login(world["ann"]))
    await move_agent("sql-analyst", "bravo")
    assert (await receive_close(watcher))["code"] == 4403
