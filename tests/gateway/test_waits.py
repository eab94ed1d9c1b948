"""Waiting for a decision holds no thread and no database connection: the decision is pushed
through the channel layer to a fully async endpoint (gateway/waits.py), served by the real
ASGI application (agentops.asgi) outside Django's middleware.

Transactional: the endpoint reads the database from executor threads, as under daphne.
"""

import asyncio
import json
import os
import threading

import pytest
from asgiref.sync import SyncToAsync, sync_to_async
from channels.testing import ApplicationCommunicator, HttpCommunicator
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection

from agentops.asgi import application
from approvals import decisions
from approvals.models import Approval
from gateway import waits, wakeups
from runs.models import args_hash
from tests.conftest import make_user

from .conftest import AgentClient, make_agent

pytestmark = pytest.mark.django_db(transaction=True)
INVOICE = {"vendor": "acme", "amount": 900}
# Generous bounds for a loaded machine: only a broken push (or a stalled server) reaches them.
ANSWER_WITHIN = 10.0


@pytest.fixture(autouse=True)
def _no_safety_reads(monkeypatch):
    # The safety timer must not be what answers: only the pushed decision may.
    monkeypatch.setattr(waits, "RECHECK_SECONDS", 3600.0)


def _db(fn):
    """Run `fn` in a thread of its own with its own connection, closed afterwards."""

    def work(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            connection.close()

    return sync_to_async(work, thread_sensitive=False)


def _setup(calls: int = 1) -> tuple[str, str, list[dict]]:
    agent, token = make_agent()
    agent.limits = {"max_steps": 1000}
    agent.save()
    bot = AgentClient(token)
    session = bot.session()
    made = [bot.call(session, "pay_invoice", {**INVOICE, "amount": 900 + n}) for n in range(calls)]
    assert all(m.status_code == 202 for m in made)
    made = [m.json() for m in made]
    return token, session, made


def _decide(approval_id: str, decision: str = "approve") -> None:

    User = get_user_model()
    user = User.objects.filter(username="arthur").first() or make_user(User, "arthur", "approver")
    approval = Approval.objects.get(pk=approval_id)
    decisions.decide(
        approval_id,
        user=user,
        decision=decision,
        reason="no" if decision == "reject" else "",
        shown_args_hash=args_hash(approval.tool, approval.args),
    )


def _get(path: str, token: str, **headers) -> HttpCommunicator:
    sent = [(b"host", b"testserver"), (b"authorization", f"Bearer {token}".encode())]
    sent += [(k.encode(), v.encode()) for k, v in headers.items()]
    return HttpCommunicator(application, "GET", path, headers=sent)


async def _members(topic: str) -> int:
    """Waits of this process listening to `topic` (the test's loop is the server's)."""
    return waits.listeners(topic)


async def _until(predicate, timeout: float = ANSWER_WITHIN) -> None:
    """Wait for an event (checked on each loop turn), bounded."""
    async with asyncio.timeout(timeout):
        while not await predicate():
            await asyncio.sleep(0.01)


async def test_a_decision_wakes_the_long_poll_at_once():
    token, _, (call,) = await _db(_setup)()
    poll = _get(f"/api/external/calls/{call['call']}?wait=25", token)
    await poll.send_input({"type": "http.request", "body": b""})
    topic = wakeups.call_topic(call["call"])
    await _until(lambda: _members_is(topic, 1))
    await _db(_decide)(call["approval"])
    response = await poll.get_response(timeout=ANSWER_WITHIN)
    body = json.loads(response["body"])
    assert response["status"] == 200
    assert (body["status"], body["args"]) == ("approved", INVOICE)
    assert await _members(topic) == 0  # it stopped listening


def test_long_polls_asked_together_do_not_end_together():
    # Up to WAIT_JITTER (a fifth) shorter than asked, never longer, and spread over that.
    waited = [waits.jittered(30.0) for _ in range(500)]
    assert all(24.0 <= w <= 30.0 for w in waited)
    assert max(waited) - min(waited) > 4.0
    assert len({round(w, 3) for w in waited}) > 400


async def test_a_pending_long_poll_ends_at_its_jittered_time(monkeypatch):
    # The most jitter drawn: a 2 s wait ends after 1.6 s, pending, not after 2 s.
    monkeypatch.setattr(waits.random, "uniform", lambda low, high: high)
    token, _, (call,) = await _db(_setup)()
    poll = _get(f"/api/external/calls/{call['call']}?wait=2", token)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await poll.send_input({"type": "http.request", "body": b""})
    response = await poll.get_response(timeout=ANSWER_WITHIN)
    took = loop.time() - started
    assert json.loads(response["body"])["status"] == "pending"
    assert 1.5 <= took < 1.95, took


async def _members_is(topic: str, count: int) -> bool:
    return await _members(topic) == count


async def test_a_waiter_that_times_out_leaves_the_others_listening():
    token, _, (call,) = await _db(_setup)()
    topic = wakeups.call_topic(call["call"])
    short = _get(f"/api/external/calls/{call['call']}?wait=0.5", token)
    long = _get(f"/api/external/calls/{call['call']}?wait=25", token)
    await long.send_input({"type": "http.request", "body": b""})
    await _until(lambda: _members_is(topic, 1))
    # The short wait ends pending; the process still listens to the call for the long one.
    assert json.loads((await short.get_response(ANSWER_WITHIN))["body"])["status"] == "pending"
    assert await _members(topic) == 1
    await _db(_decide)(call["approval"])
    answer = await long.get_response(timeout=ANSWER_WITHIN)
    assert json.loads(answer["body"])["status"] == "approved"
    await _until(lambda: _members_is(topic, 0))


async def test_the_long_poll_answers_like_the_api():
    token, _, (call,) = await _db(_setup)()
    path = f"/api/external/calls/{call['call']}"
    assert (await _get(f"{path}?wait=31", token).get_response())["status"] == 422
    assert (await _get(path, "aoa_wrong").get_response())["status"] == 401
    other = await _db(lambda: make_agent("other-bot")[1])()
    assert (await _get(path, other).get_response())["status"] == 404
    pending = await _get(f"{path}?wait=0", token).get_response()
    assert json.loads(pending["body"])["status"] == "pending"
    foreign = HttpCommunicator(
        application,
        "GET",
        path,
        headers=[(b"host", b"evil.example"), (b"authorization", f"Bearer {token}".encode())],
    )
    assert (await foreign.get_response())["status"] == 400


async def _checked_out() -> int:
    """Connections checked out of the pool (Postgres; 0 elsewhere), this reader's included."""
    if not settings.IS_POSTGRES:
        return 0

    def count() -> int:
        connection.ensure_connection()
        stats = connection.pool.get_stats()
        return stats["pool_size"] - stats.get("pool_available", 0)

    return await _db(count)()


def _pool_max() -> int:
    pool = settings.DATABASES["default"].get("OPTIONS", {}).get("pool")
    return pool["max_size"] if isinstance(pool, dict) else 20


async def test_more_waiting_calls_than_the_pool_hold_no_thread_and_others_are_served():
    waiting = _pool_max() + 5
    token, session, calls = await _db(_setup)(waiting)
    checked_out_before = await _checked_out()
    threads_before = threading.active_count()
    contexts_before = len(SyncToAsync.context_to_thread_executor)
    polls = [_get(f"/api/external/calls/{c['call']}?wait=25", token) for c in calls]
    for poll in polls:
        await poll.send_input({"type": "http.request", "body": b""})

    async def all_listening() -> bool:
        counts = [await _members(wakeups.call_topic(c["call"])) for c in calls]
        return all(counts)

    await _until(all_listening)
    # No request keeps a thread of its own (a sync middleware would: one per request), and
    # at most the loop's executor threads run the short reads.
    assert len(SyncToAsync.context_to_thread_executor) == contexts_before
    assert threading.active_count() - threads_before <= min(32, (os.cpu_count() or 1) + 4)
    # Once their first reads are done, not one connection more is checked out of the pool
    # than before they waited, and they all still wait.

    async def connections_given_back() -> bool:
        return await _checked_out() <= checked_out_before

    await _until(connections_given_back)
    assert all(poll.output_queue.empty() for poll in polls)
    # An unrelated request is served while they all wait.
    health = HttpCommunicator(application, "GET", "/healthz", headers=[(b"host", b"testserver")])
    assert (await health.get_response(timeout=ANSWER_WITHIN))["status"] == 200
    # The session ends: every waiter is woken with its call cancelled.
    bot = AgentClient(token)
    closed = await _db(lambda: bot.post(f"/sessions/{session}/close", {"status": "failed"}))()
    assert closed.status_code == 200
    answers = await asyncio.gather(*(p.get_response(timeout=ANSWER_WITHIN) for p in polls))
    assert {json.loads(a["body"])["status"] for a in answers} == {"cancelled"}


async def test_a_client_that_goes_away_stops_listening():
    token, _, (call,) = await _db(_setup)()
    poll = _get(f"/api/external/calls/{call['call']}?wait=25", token)
    await poll.send_input({"type": "http.request", "body": b""})
    topic = wakeups.call_topic(call["call"])
    await _until(lambda: _members_is(topic, 1))
    await poll.send_input({"type": "http.disconnect"})
    await _until(lambda: _members_is(topic, 0))
    await poll.wait(timeout=ANSWER_WITHIN)


# --- Server-Sent Events ---------------------------------------------------------------------
class Stream:
    def __init__(self, token: str, session: str, **headers):
        self.app = ApplicationCommunicator(
            application,
            _get(f"/api/external/sessions/{session}/events", token, **headers).scope,
        )
        self.buffer = ""

    async def open(self) -> int:
        await self.app.send_input({"type": "http.request", "body": b""})
        start = await self.app.receive_output(ANSWER_WITHIN)
        return start["status"]

    async def event(self) -> dict:
        """The next event (comments skipped): {"id":…, "event":…, "data":…}."""
        while True:
            if "\n\n" in self.buffer:
                block, self.buffer = self.buffer.split("\n\n", 1)
                fields = dict(
                    line.split(": ", 1)
                    for line in block.splitlines()
                    if not line.startswith(":") and ": " in line
                )
                if "event" in fields:
                    fields["data"] = json.loads(fields["data"])
                    return fields
                continue
            message = await self.app.receive_output(ANSWER_WITHIN)
            self.buffer += message.get("body", b"").decode()

    async def close(self) -> None:
        await self.app.send_input({"type": "http.disconnect"})
        await self.app.wait(ANSWER_WITHIN)


async def test_the_event_stream_pushes_decisions_and_resumes_after_a_drop():
    token, session, (first, second) = await _db(_setup)(2)
    stream = Stream(token, session)
    assert await stream.open() == 200
    await _until(lambda: _members_is(wakeups.session_topic(session), 1))
    await _db(_decide)(first["approval"])
    event = await stream.event()
    assert (event["event"], event["data"]["call"], event["data"]["status"]) == (
        "decision",
        first["call"],
        "approved",
    )
    await stream.close()
    # Decided while the agent was away: it reconnects with the last id it saw.
    await _db(_decide)(second["approval"], "reject")
    again = Stream(token, session, **{"last-event-id": event["id"]})
    assert await again.open() == 200
    missed = await again.event()
    assert (missed["data"]["call"], missed["data"]["status"]) == (second["call"], "rejected")
    assert int(missed["id"]) > int(event["id"])
    # The session ends: a closed event, and the stream ends.
    bot = AgentClient(token)
    await _db(lambda: bot.post(f"/sessions/{session}/close", {"status": "succeeded"}))()
    closed = await again.event()
    assert (closed["event"], closed["data"]["status"]) == ("closed", "succeeded")
    # From the start, everything is there once.
    replay = Stream(token, session)
    assert await replay.open() == 200
    seen = [await replay.event() for _ in range(3)]
    assert [e["event"] for e in seen] == ["decision", "decision", "closed"]


async def test_the_event_stream_refuses_a_wrong_token_or_session():
    _, session, _ = await _db(_setup)()
    assert await Stream("aoa_wrong", session).open() == 401
    other = await _db(lambda: make_agent("other-bot")[1])()
    assert await Stream(other, session).open() == 404


async def test_a_long_poll_already_waiting_gets_401_once_its_agent_is_switched_off():
    token, _, (call,) = await _db(_setup)()
    poll = _get(f"/api/external/calls/{call['call']}?wait=25", token)
    await poll.send_input({"type": "http.request", "body": b""})
    await _until(lambda: _members_is(wakeups.call_topic(call["call"]), 1))

    @_db
    def switch_off():
        from gateway.models import ExternalAgent

        agent = ExternalAgent.authenticate(token)
        agent.active = False
        agent.save()

    await switch_off()
    # Long before its 25 s wait ends (the safety timer is off: only the wake-up answers).
    response = await poll.get_response(timeout=ANSWER_WITHIN)
    assert response["status"] == 401
