"""Access ends when access ends (runs/access.py): a logout, a deactivation or a role taken
away closes the user's live sockets, a run's timeline and the approvals stream alike, and
nothing is sent on them afterwards."""

import asyncio
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group
from django.contrib.sessions.backends.db import SessionStore
from django.db import OperationalError
from django.test import Client
from django.utils import timezone

from agentops.asgi import application
from approvals.models import Approval
from runs import consumers, events
from runs.models import Run

from .factories import add_steps, make_run
from .test_consumers import ORIGIN, receive_through, receive_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

# The promise: no frame reaches a revoked user more than 5 s after the change. A deadline
# that fails only a close that does not come in time, never a slow but correct one.
REVOKED_WITHIN = 5.0


@pytest.fixture
def announced_only(monkeypatch):
    """The periodic re-check out of the way: what closes the socket is the announcement."""
    monkeypatch.setattr(consumers, "ACCESS_CHECK_SECONDS", 3600)


async def login(user) -> Client:
    client = Client()
    await sync_to_async(client.force_login)(user)
    return client


async def watch(path: str, client: Client) -> WebsocketCommunicator:
    cookie = (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())
    communicator = WebsocketCommunicator(application, path, headers=[ORIGIN, cookie])
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    return communicator


async def receive_close(communicator) -> dict:
    """The close, after whatever frames came before it."""
    deadline = asyncio.get_running_loop().time() + REVOKED_WITHIN
    while True:
        left = deadline - asyncio.get_running_loop().time()
        message = await communicator.receive_output(timeout=max(left, 0.01))
        if message["type"] == "websocket.close":
            return message


async def assert_sent_nothing_more(communicator) -> None:
    await communicator.disconnect()  # the consumer has finished: its output is complete
    assert await communicator.receive_nothing(timeout=0)


# --- the changes that end access ----------------------------------------------------------
async def log_out(user, client: Client) -> None:
    response = await sync_to_async(client.post)("/accounts/logout/")
    assert response.status_code == 302


async def deactivate(user, client: Client) -> None:
    user.is_active = False
    await sync_to_async(user.save)()


async def remove_roles(user, client: Client) -> None:
    await sync_to_async(user.groups.clear)()


async def remove_from_role_group(user, client: Client) -> None:
    @sync_to_async
    def remove():
        for group in Group.objects.filter(user=user):
            group.user_set.remove(user)

    await remove()


async def change_password(user, client: Client) -> None:
    # The session still names the user, but its auth hash is the old password's.
    user.set_password("a-new-password")
    await sync_to_async(user.save)()


async def delete_user(user, client: Client) -> None:
    await sync_to_async(user.delete)()


async def rename_role_group(user, client: Client) -> None:
    @sync_to_async
    def rename():
        for group in Group.objects.filter(user=user):
            group.name = f"{group.name}-retired"
            group.save()

    await rename()


async def delete_role_group(user, client: Client) -> None:
    await sync_to_async(lambda: Group.objects.filter(user=user).delete())()


REVOCATIONS = [
    log_out,
    deactivate,
    remove_roles,
    remove_from_role_group,
    change_password,
    delete_user,
    rename_role_group,
    delete_role_group,
]


# --- the streams ------------------------------------------------------------------------------
def open_approval(run: Run) -> None:
    approval = Approval.objects.create(
        run=run,
        gate_seq=1,
        llm_seq=1,
        kind=Approval.Kind.QUESTION,
        tool="ask_operator",
        question="Which region?",
        explanation="the agent asked",
        expires_at=timezone.now() + timedelta(hours=1),
    )
    events.publish_approvals_changed(approval.pk)


def pending_count(n: int):
    return lambda m: (
        f'<span id="nav-pending-count" class="count" hx-swap-oob="true">{n}</span>' in m
    )


@pytest.mark.parametrize("revoke", REVOCATIONS, ids=lambda f: f.__name__)
async def test_a_revoked_watcher_of_a_run_is_closed_and_gets_nothing_more(
    revoke, announced_only, run, operator, viewer
):
    session = await login(operator)
    watcher = await watch(f"/ws/runs/{run.pk}/?after=5", session)
    bystander = await watch(f"/ws/runs/{run.pk}/?after=5", await login(viewer))

    await revoke(operator, session)
    assert (await receive_close(watcher))["code"] == 4403

    # The run goes on: someone else still watching gets its next step, the revoked one not.
    await sync_to_async(add_steps)(run, 1)
    assert await receive_through(bystander, 6) == [6]
    await assert_sent_nothing_more(watcher)
    await bystander.disconnect()


@pytest.mark.parametrize("revoke", REVOCATIONS, ids=lambda f: f.__name__)
async def test_a_revoked_approver_is_closed_and_gets_nothing_more(
    revoke, announced_only, approver, operator, viewer, no_enqueue
):
    run = await sync_to_async(make_run)(operator, status=Run.Status.WAITING)
    session = await login(approver)
    watcher = await watch("/ws/approvals/", session)
    bystander = await watch("/ws/approvals/", await login(viewer))
    await receive_until(bystander, pending_count(0))  # its state on connect

    await revoke(approver, session)
    assert (await receive_close(watcher))["code"] == 4403

    # A new approval: the queue of someone else still watching shows it, the revoked one not.
    await sync_to_async(open_approval)(run)
    await receive_until(bystander, pending_count(1))
    await assert_sent_nothing_more(watcher)
    await bystander.disconnect()


async def test_a_logout_closes_only_that_sessions_sockets(announced_only, run, operator):
    # Signed in twice (two browsers): signing out of one leaves the other watching.
    leaving, staying = await login(operator), await login(operator)
    closed = await watch(f"/ws/runs/{run.pk}/?after=5", leaving)
    kept = await watch(f"/ws/runs/{run.pk}/?after=5", staying)

    await log_out(operator, leaving)
    assert (await receive_close(closed))["code"] == 4403
    await sync_to_async(add_steps)(run, 1)
    assert await receive_through(kept, 6) == [6]
    await kept.disconnect()


async def test_a_change_that_leaves_access_keeps_the_socket(announced_only, run, operator):
    session = await login(operator)
    watcher = await watch(f"/ws/runs/{run.pk}/?after=5", session)
    operator.first_name = "Olivia"
    await sync_to_async(operator.save)()  # announced, re-checked: still allowed
    # The step comes after the announcement on the same channel, so it was handled first.
    await sync_to_async(add_steps)(run, 1)
    assert await receive_through(watcher, 6) == [6]
    await watcher.disconnect()


async def _deactivate_quietly(user, client: Client) -> None:
    await sync_to_async(type(user).objects.filter(pk=user.pk).update)(is_active=False)


async def _end_session_quietly(user, client: Client) -> None:
    await sync_to_async(SessionStore(client.cookies["sessionid"].value).delete)()


async def _take_roles_quietly(user, client: Client) -> None:
    await sync_to_async(type(user).groups.through.objects.filter(user=user).delete)()


@pytest.mark.parametrize(
    "revoke",
    [_deactivate_quietly, _end_session_quietly, _take_roles_quietly],
    ids=lambda f: f.__name__.strip("_"),
)
@pytest.mark.parametrize("path", ["run", "/ws/approvals/", "/ws/runs/"])
async def test_a_change_nobody_announced_is_found_by_the_periodic_recheck(
    revoke, path, monkeypatch, run, operator
):
    # A queryset update sends no signal, and an announcement can be lost on the way.
    monkeypatch.setattr(consumers, "ACCESS_CHECK_SECONDS", 0.1)
    session = await login(operator)
    watcher = await watch(f"/ws/runs/{run.pk}/?after=5" if path == "run" else path, session)
    await revoke(operator, session)
    assert (await receive_close(watcher))["code"] == 4403
    await assert_sent_nothing_more(watcher)


async def test_sockets_of_one_login_watching_a_run_share_the_periodic_recheck(
    monkeypatch, run, operator, viewer
):
    monkeypatch.setattr(consumers, "ACCESS_CHECK_SECONDS", 0.1)
    checks = []
    session_user = consumers.access.session_user

    def counted(key):
        checks.append(key)
        return session_user(key)

    monkeypatch.setattr(consumers.access, "session_user", counted)
    session = await login(operator)
    watchers = [await watch(f"/ws/runs/{run.pk}/?after=5", session) for _ in range(3)]
    other = await watch(f"/ws/runs/{run.pk}/?after=5", await login(viewer))
    # Counted in checks, not seconds, from when all are connected: while the viewer's one
    # socket is checked four times, the operator's three sockets are checked as one (about
    # four times; a check each would be about twelve).
    viewer_key = other.scope["headers"][-1][1].decode().split("=", 1)[1]
    checks.clear()
    async with asyncio.timeout(10):
        while checks.count(viewer_key) < 4:
            await asyncio.sleep(0.02)
    assert len(set(checks)) == 2
    assert len(checks) - checks.count(viewer_key) <= 2 * checks.count(viewer_key)

    # The shared check failing closes every socket of that login, and no other.
    await _deactivate_quietly(operator, session)
    for watcher in watchers:
        assert (await receive_close(watcher))["code"] == 4403
        await assert_sent_nothing_more(watcher)
    await sync_to_async(add_steps)(run, 1)
    assert await receive_through(other, 6) == [6]
    await other.disconnect()


async def test_a_recheck_that_cannot_reach_the_database_is_tried_again(
    monkeypatch, run, operator, caplog
):
    monkeypatch.setattr(consumers, "ACCESS_CHECK_SECONDS", 0.1)
    checks = []

    async def unreachable_then_revoked(self) -> bool:
        checks.append(self)
        if len(checks) == 1:
            raise OperationalError("the database is unreachable")
        return False

    monkeypatch.setattr(consumers.WatchedAccess, "_still_allowed", unreachable_then_revoked)
    watcher = await watch(f"/ws/runs/{run.pk}/?after=5", await login(operator))
    assert (await receive_close(watcher))["code"] == 4403
    await assert_sent_nothing_more(watcher)
    assert len(checks) == 2
    assert "re-checking live sockets' access failed" in caplog.text
