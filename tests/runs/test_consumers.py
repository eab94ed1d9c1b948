import asyncio
import json
import re
from collections.abc import Callable

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.db import transaction
from django.test import Client

from agentops.asgi import application
from runs import events, feeds
from runs.models import Run, Step

from .factories import XSS, add_steps, make_run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

ORIGIN = (b"origin", b"http://testserver")


@sync_to_async
def session_cookie(user) -> tuple[bytes, bytes]:
    client = Client()
    client.force_login(user)
    return (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())


async def connect(path: str, user=None, origin=ORIGIN):
    """Connect, and for a run's socket wait until it is admitted (in the run's feed): the
    handshake is answered before the access check (runs/consumers.py `admit`), so a step or
    draft sent right after the handshake could otherwise reach the run before the socket."""
    headers = [origin] if origin else []
    if user is not None:
        headers.append(await session_cookie(user))
    run_id = _run_of(path)
    before = _watching(run_id)
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, _ = await communicator.connect(timeout=5)
    if connected and run_id:
        deadline = asyncio.get_running_loop().time() + 10
        while _watching(run_id) <= before and asyncio.get_running_loop().time() < deadline:
            if not await communicator.receive_nothing(timeout=0.02):
                break  # it sent something (its catch-up, or a refusal): it was looked at
    return communicator, connected


def _run_of(path: str) -> str:
    found = re.match(r"/ws/runs/([0-9a-f-]{36})/", path)
    return found.group(1) if found else ""


def _watching(run_id: str) -> int:
    feed = feeds._feeds.get(run_id) if run_id else None
    return len(feed.sockets) if feed is not None else 0


async def refused(path: str, user=None, origin=ORIGIN) -> bool:
    """Refused at the handshake (no session cookie, another origin), or accepted and then
    closed with 4403 before any frame: the access check runs once the handshake is answered
    (runs/consumers.py `admit`)."""
    communicator, connected = await connect(path, user, origin)
    if not connected:
        return True
    output = await communicator.receive_output(timeout=5)
    await communicator.disconnect()
    return output == {"type": "websocket.close", "code": 4403}


def seqs(html: str) -> list[int]:
    return [int(s) for s in re.findall(r'<article class="step[^"]*" id="step-(\d+)"', html)]


async def receive_until(communicator, done: Callable[[str], bool]) -> list[str]:
    """The messages up to and including the first one `done` accepts: a positive signal that
    everything sent before it has arrived, instead of waiting for a quiet moment. (The
    deadline only fails a test whose signal never comes.)"""
    out = []
    while not out or not done(out[-1]):
        out.append(await communicator.receive_from(timeout=10))
    return out


async def receive_through(communicator, seq: int) -> list[int]:
    """The step seqs received up to and including step `seq`."""
    messages = await receive_until(communicator, lambda m: seq in seqs(m))
    return [s for m in messages for s in seqs(m)]


async def launch_marker(operator) -> str:
    """A run launched after what a test checks: its row arrives after everything before it
    (a consumer handles its group's events in order). Returns its id, to wait for."""
    return str((await sync_to_async(make_run)(operator)).pk)


async def test_anonymous_users_are_refused(run):
    _, connected = await connect(f"/ws/runs/{run.pk}/")
    assert not connected  # at the handshake: no session cookie, nothing to read


async def test_a_session_of_nobody_is_refused_before_any_frame(run, db):
    cookie = (b"cookie", b"sessionid=abcdefghijklmnopqrstuvwxyz012345")
    for path in (f"/ws/runs/{run.pk}/", "/ws/runs/", "/ws/approvals/"):
        communicator = WebsocketCommunicator(application, path, headers=[ORIGIN, cookie])
        connected, _ = await communicator.connect(timeout=5)
        assert connected, path
        closed = await communicator.receive_output(timeout=5)
        assert closed == {"type": "websocket.close", "code": 4403}, path
        await communicator.disconnect()


async def test_other_origins_are_refused(run, viewer):
    _communicator, connected = await connect(
        f"/ws/runs/{run.pk}/", viewer, origin=(b"origin", b"http://evil.example")
    )
    assert not connected
    _, connected = await connect("/ws/approvals/", viewer, origin=None)
    assert not connected


async def test_users_without_a_role_are_refused(run, django_user_model):
    nobody = await sync_to_async(django_user_model.objects.create_user)("nobody", password="x")
    for path in (f"/ws/runs/{run.pk}/", "/ws/runs/", "/ws/approvals/"):
        assert await refused(path, nobody), path


async def test_unknown_run_is_refused(viewer, db):
    assert await refused("/ws/runs/00000000-0000-0000-0000-000000000000/", viewer)


async def test_it_sends_the_steps_after_the_given_seq_then_live_ones_once(run, viewer):
    communicator, connected = await connect(f"/ws/runs/{run.pk}/?after=2", viewer)
    assert connected
    caught_up = await receive_until(communicator, lambda m: 5 in seqs(m))
    assert [s for m in caught_up for s in seqs(m)] == [3, 4, 5]
    assert all('hx-swap-oob="beforeend:#timeline"' in m for m in caught_up)
    # The header (status, usage) comes once, with the newest step.
    assert ['id="run-header"' in m for m in caught_up] == [False, False, True]

    # A step committed now is pushed live, rendered once, after commit.
    await sync_to_async(add_steps)(run, 1)
    live = await communicator.receive_from(timeout=5)
    assert seqs(live) == [6]
    assert 'id="run-header" class="card run-header" hx-swap-oob="true"' in live

    # A repeated event (e.g. a retried publish) is dropped: no duplicate in the browser.
    step = await sync_to_async(Step.objects.get)(run=run, seq=6)
    await sync_to_async(events.publish_step)(step)
    # The next step is the next thing the browser gets: nothing came in between.
    await sync_to_async(add_steps)(run, 1)
    assert await receive_through(communicator, 7) == [7]
    await communicator.disconnect()


async def test_a_reconnect_gets_exactly_what_it_missed(run, viewer):
    first, _ = await connect(f"/ws/runs/{run.pk}/?after=4", viewer)
    assert await receive_through(first, 5) == [5]  # caught up, nothing more
    await first.disconnect()
    await sync_to_async(add_steps)(run, 3)  # 6, 7, 8 while disconnected
    second, connected = await connect(f"/ws/runs/{run.pk}/?after=5", viewer)
    assert connected
    assert await receive_through(second, 8) == [6, 7, 8]
    await sync_to_async(add_steps)(run, 1)  # and then only what comes next
    assert await receive_through(second, 9) == [9]
    await second.disconnect()


async def test_a_gap_in_live_events_is_filled_from_the_database(run, viewer):
    communicator, _ = await connect(f"/ws/runs/{run.pk}/?after=5", viewer)
    # Steps 6 and 7 commit but only 7's event reaches the consumer (6's was lost).
    await sync_to_async(_append_quietly)(run, 2)
    await get_channel_layer().group_send(
        events.run_group(run.pk), {"type": "run.step", "seq": 7, "kind": "tool", "html": "x"}
    )
    assert await receive_through(communicator, 7) == [6, 7]
    await communicator.disconnect()


async def test_steps_whose_events_were_all_lost_still_arrive(run, viewer, monkeypatch):
    # The run's last steps commit while the worker cannot reach Redis: no later event ever
    # reveals the gap, so the open timeline must find them in the database by itself.
    monkeypatch.setattr("runs.feeds.CATCH_UP_POLL_SECONDS", 0.1)
    communicator, _ = await connect(f"/ws/runs/{run.pk}/?after=5", viewer)
    await sync_to_async(_append_quietly)(run, 3)
    # Exactly these, in order: the first message already is the polled step 6.
    assert await receive_through(communicator, 8) == [6, 7, 8]
    await communicator.disconnect()


def _append_quietly(run, n):
    from unittest import mock

    with mock.patch("runs.models.timeline._publish_on_commit"):
        add_steps(run, n)


async def test_a_bad_after_parameter_means_from_the_start(run, viewer):
    communicator, connected = await connect(f"/ws/runs/{run.pk}/?after=abc", viewer)
    assert connected
    assert await receive_through(communicator, 5) == [1, 2, 3, 4, 5]
    await communicator.disconnect()


async def test_pushed_steps_escape_untrusted_text(run, viewer):
    communicator, _ = await connect(f"/ws/runs/{run.pk}/?after=5", viewer)

    def append():
        with transaction.atomic():
            Run.locked(run.pk).append_step(
                Step.Kind.TOOL,
                {
                    "tool_use_id": "x",
                    "tool": "run_query",
                    "args": {"sql": XSS},
                    "is_error": True,
                    "attempts": 1,
                    "error": XSS,
                },
            )

    await sync_to_async(append)()
    html = await communicator.receive_from(timeout=5)
    from tests.html_checks import assert_payload_inert

    assert_payload_inert(html)
    await communicator.disconnect()


async def test_runs_group_pushes_the_list_row_and_dashboard_row(viewer, operator, no_enqueue):
    communicator, connected = await connect("/ws/runs/", viewer)
    assert connected
    run = await sync_to_async(make_run)(operator)
    first_marker = await launch_marker(operator)
    messages = await receive_until(communicator, lambda m: first_marker in m)
    launched = "".join(m for m in messages if first_marker not in m)
    assert (
        f'id="run-{run.pk}" class="run-row" data-run-id="{run.pk}" data-status="queued"' in launched
    )
    assert 'hx-swap-oob="afterbegin:#run-rows-live"' in launched
    assert 'hx-swap-oob="afterbegin:#inflight-rows"' in launched

    def finish():
        run.cancel(reason="test")

    await sync_to_async(finish)()
    marker = await launch_marker(operator)
    messages = await receive_until(communicator, lambda m: marker in m)
    # The first marker's other rows may still come before; they are not the run's.
    html = "".join(m for m in messages if marker not in m and first_marker not in m)
    assert 'data-status="cancelled" hx-swap-oob="true"' in html
    assert f'<tr id="inflight-{run.pk}" hx-swap-oob="delete">' in html
    assert "afterbegin" not in html  # only a launch inserts a row
    await communicator.disconnect()


async def test_catch_up_larger_than_one_batch_is_complete(run, viewer, monkeypatch):
    from runs import feeds

    monkeypatch.setattr(feeds, "CATCH_UP_MAX", 2)
    communicator, _ = await connect(f"/ws/runs/{run.pk}/?after=0", viewer)
    assert await receive_through(communicator, 5) == [1, 2, 3, 4, 5]
    await communicator.disconnect()


async def test_group_streams_send_summaries_as_json_on_request(viewer, operator, no_enqueue):
    import json

    communicator, connected = await connect("/ws/runs/?format=json", viewer)
    assert connected
    run = await sync_to_async(make_run)(operator)
    message = json.loads(await communicator.receive_from(timeout=5))
    assert message == {"run_id": str(run.pk), "seq": 1, "kind": "status", "agent": run.agent}
    await communicator.disconnect()


async def test_a_merged_event_that_includes_the_launch_still_inserts_the_rows(
    viewer, operator, no_enqueue
):
    # A busy worker's outbox merges a run's waiting events into one (runs/events.py).
    from unittest import mock

    communicator, _ = await connect("/ws/runs/", viewer)
    with mock.patch("runs.models.timeline._publish_on_commit"):
        run = await sync_to_async(make_run)(operator)
        await sync_to_async(add_steps)(run, 2)
    await get_channel_layer().group_send(
        events.DASHBOARD_GROUP,
        {"type": "run.changed", "run_id": str(run.pk), "seq": 3, "first": 1, "kind": "llm"},
    )
    marker = await launch_marker(operator)
    messages = await receive_until(communicator, lambda m: marker in m)
    html = "".join(m for m in messages if marker not in m)
    assert f'id="run-{run.pk}"' in html
    assert 'hx-swap-oob="afterbegin:#run-rows-live"' in html
    assert 'hx-swap-oob="afterbegin:#inflight-rows"' in html
    await communicator.disconnect()


async def test_tool_steps_do_not_push_list_rows(run, viewer, operator):
    # A tool call changes nothing a runs-list or dashboard row shows; model calls do.
    communicator, _ = await connect("/ws/runs/?format=json", viewer)
    await sync_to_async(add_steps)(run, 2)  # seq 6 model call, seq 7 tool call
    marker = await launch_marker(operator)
    got = [json.loads(m) for m in await receive_until(communicator, lambda m: marker in m)]
    assert [(m["seq"], m["kind"]) for m in got[:-1]] == [(6, "llm")]
    await communicator.disconnect()


async def test_the_controls_lose_cancel_when_the_watched_run_ends(run, viewer, operator):
    communicator, _ = await connect(f"/ws/runs/{run.pk}/?after=5", viewer)
    # A step of a run still going leaves the controls alone (they depend on who watches).
    await sync_to_async(add_steps)(run, 1)
    [going] = await receive_until(communicator, lambda m: 6 in seqs(m))
    assert 'id="run-actions"' not in going

    await sync_to_async(run.cancel)(by=operator, reason="enough")
    [ended] = await receive_until(communicator, lambda m: 7 in seqs(m))
    assert 'data-status="cancelled"' in ended
    assert '<div id="run-actions" class="actions" hx-swap-oob="true">' in ended
    assert 'id="cancel-run"' not in ended
    assert "Export JSON" in ended
    await communicator.disconnect()


@pytest.fixture
def slow_queries(monkeypatch):
    """Every query made while `on` is set takes `seconds` longer (a database slowed down by a
    reconnect storm); records the threads the queries ran on and how many there were."""
    import threading
    import time
    from types import SimpleNamespace

    from django.db.backends import utils

    state = SimpleNamespace(on=threading.Event(), seconds=0.2, threads=set(), count=0)
    real = utils.CursorWrapper._execute

    def slow(self, sql, params, *ignore):
        if state.on.is_set():
            state.threads.add(threading.get_ident())
            state.count += 1
            time.sleep(state.seconds)
        return real(self, sql, params, *ignore)

    monkeypatch.setattr(utils.CursorWrapper, "_execute", slow)
    return state


async def test_the_handshake_is_answered_before_any_database_read(run, viewer, slow_queries):
    """A reconnect storm on a busy server: the access checks may take long, but the handshake
    must not wait for them (daphne drops one unanswered within its timeout), and nothing is
    sent before the check passes."""
    cookie = await session_cookie(viewer)
    slow_queries.seconds = 1.5
    slow_queries.on.set()
    communicator = WebsocketCommunicator(application, "/ws/approvals/", headers=[ORIGIN, cookie])
    connected, _ = await communicator.connect(timeout=1)
    assert connected  # answered while the check still waits on the database
    assert await communicator.receive_nothing(timeout=0.5)  # nothing before it passes
    slow_queries.on.clear()
    state = await communicator.receive_from(timeout=20)  # admitted: the current state
    assert 'id="nav-pending-count"' in state
    await communicator.disconnect()


async def test_sockets_connecting_at_once_are_checked_side_by_side(run, viewer, slow_queries):
    """Each socket's access reads run on any executor thread, not queued one after another on
    asgiref's one thread_sensitive thread (where a storm's checks waited past the timeout)."""
    cookie = await session_cookie(viewer)
    sockets = [
        WebsocketCommunicator(application, "/ws/approvals/", headers=[ORIGIN, cookie])
        for _ in range(4)
    ]
    slow_queries.on.set()
    started = asyncio.get_running_loop().time()
    connected = await asyncio.gather(*(s.connect(timeout=60) for s in sockets))
    states = await asyncio.gather(*(s.receive_from(timeout=60) for s in sockets))
    took = asyncio.get_running_loop().time() - started
    slow_queries.on.clear()
    assert all(c for c, _ in connected)
    assert all('id="nav-pending-count"' in s for s in states)
    one_after_another = slow_queries.count * slow_queries.seconds
    assert len(slow_queries.threads) > 1
    assert took < 0.6 * one_after_another, (took, one_after_another)
    for s in sockets:
        await s.disconnect()
