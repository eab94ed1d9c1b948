"""Many calls waiting in one process: waiting costs the channel layer nothing per waiter, and
a decision reaches its own waiter at once however many others come and go (gateway/waits.py).

Waiters here are `waits.call_state`, what the long-poll endpoint runs, side by side in this
test's loop as in one daphne. Transactional: their reads run in executor threads.
"""

import asyncio
import time
from collections import Counter

import pytest
from channels.layers import get_channel_layer

from gateway import waits, wakeups
from runs.models import Run

from .conftest import AgentClient, make_agent
from .test_waits import ANSWER_WITHIN, _db, _decide, _setup

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_safety_reads(monkeypatch):
    # Only a pushed decision may answer: the safety timer would hide a lost one.
    monkeypatch.setattr(waits, "RECHECK_SECONDS", 3600.0)


@pytest.fixture
def reads(monkeypatch) -> Counter:
    """Database reads of a call's state, by call id."""
    counted: Counter = Counter()
    real = waits.read_call

    def read_call(token: str, call_id: str):
        counted[call_id] += 1
        return real(token, call_id)

    monkeypatch.setattr(waits, "read_call", read_call)
    return counted


@pytest.fixture
def layer_calls(monkeypatch) -> Counter:
    """Calls this process makes to the channel layer, by method."""
    layer = get_channel_layer()
    counted: Counter = Counter()
    for name in ("group_add", "group_discard", "receive", "new_channel"):
        real = getattr(layer, name)

        def counting(*args, _real=real, _name=name, **kwargs):
            counted[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(layer, name, counting)
    return counted


async def _until(predicate, timeout: float = ANSWER_WITHIN) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


async def test_waiting_calls_cost_the_channel_layer_nothing_each_and_never_poll(reads, layer_calls):
    token, _, calls = await _db(_setup)(40)
    waiting = [asyncio.ensure_future(waits.call_state(token, c["call"], 25)) for c in calls]
    await _until(lambda: len(reads) == len(calls))
    before = (Counter(reads), Counter(layer_calls))
    await asyncio.sleep(1.0)  # nobody decides
    # Over a quiet second: no waiter read the database again, none talked to the layer.
    assert (reads, layer_calls) == before
    assert set(reads.values()) == {1}
    # The process listens once for all of them: membership does not grow with the waiters.
    assert layer_calls["group_add"] + layer_calls["group_discard"] <= 1
    assert layer_calls["receive"] <= 1
    for task in waiting:
        task.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)
    assert layer_calls["group_discard"] == 0  # waiters leave in-process


async def test_a_waiter_is_woken_by_its_own_call_only(reads):
    token, _, (mine, other) = await _db(_setup)(2)
    mine_waits = asyncio.ensure_future(waits.call_state(token, mine["call"], 25))
    other_waits = asyncio.ensure_future(waits.call_state(token, other["call"], 25))
    await _until(lambda: reads[mine["call"]] == reads[other["call"]] == 1)
    await _db(_decide)(mine["approval"])
    status, body = await asyncio.wait_for(mine_waits, ANSWER_WITHIN)
    assert (status, body["status"]) == (200, "approved")
    await asyncio.sleep(0.3)
    assert reads[other["call"]] == 1  # not woken: still waiting on its first read
    assert not other_waits.done()
    other_waits.cancel()
    await asyncio.gather(other_waits, return_exceptions=True)


async def test_a_decision_reaches_its_waiter_at_once_while_many_others_come_and_go(
    reads, monkeypatch
):
    # Agents re-poll all the time (10 000 waiting calls: 333 new long-polls a second), and
    # each channel-layer round trip takes a while on a busy Redis. Neither may hold back
    # the answer of a decided call.
    layer = get_channel_layer()
    for name in ("group_add", "group_discard"):
        real = getattr(layer, name)

        async def slow(*args, _real=real, **kwargs):
            await asyncio.sleep(0.2)
            return await _real(*args, **kwargs)

        monkeypatch.setattr(layer, name, slow)
    token, _, (decided, *others) = await _db(_setup)(11)
    stop = asyncio.Event()
    asked: Counter = Counter()

    async def re_polling(call_id: str) -> None:
        while not stop.is_set():
            await waits.call_state(token, call_id, 0.5)
            asked[call_id] += 1

    churn = [asyncio.ensure_future(re_polling(c["call"])) for c in others]
    waiter = asyncio.ensure_future(waits.call_state(token, decided["call"], 25))
    await _until(lambda: reads[decided["call"]] == 1)
    await asyncio.sleep(1.5)  # the others keep coming and going
    await _db(_decide)(decided["approval"])
    committed = time.monotonic()
    try:
        status, body = await asyncio.wait_for(waiter, ANSWER_WITHIN)
        took = time.monotonic() - committed
    finally:
        stop.set()
        for task in churn:
            task.cancel()
        await asyncio.gather(*churn, return_exceptions=True)
    assert (status, body["status"]) == (200, "approved")
    assert took < 0.5, f"the decided call was answered {took:.2f} s after its decision"
    assert min(asked[c["call"]] for c in others) >= 2  # they did come and go meanwhile


async def test_an_agent_asking_again_is_answered_from_what_the_process_knows(reads):
    token, _, (call,) = await _db(_setup)()
    first = await waits.call_state(token, call["call"], 0.2)
    again = await waits.call_state(token, call["call"], 0.2)
    assert first == again and first[1]["status"] == "pending"
    assert reads[call["call"]] == 1  # asked twice, read once: nothing came about it since
    # Another agent's token is never answered from it.
    other = await _db(lambda: make_agent("other-bot")[1])()
    assert (await waits.call_state(other, call["call"], 0.2))[0] == 404
    # Decided while nobody waited: the message makes the process forget, the next ask reads.
    await _db(_decide)(call["approval"])
    await _until(lambda: not waits._hub().pending)
    status, body = await waits.call_state(token, call["call"], 0.2)
    assert (status, body["status"]) == (200, "approved")
    # A message the process may have missed (the layer failed): nothing is known any more.
    _, _, (later,) = await _db(_setup_more)(token)
    await waits.call_state(token, later["call"], 0.2)
    waits._hub().doubt()
    before = reads[later["call"]]
    await waits.call_state(token, later["call"], 0.2)
    assert reads[later["call"]] == before + 1


def _setup_more(token: str):
    bot = AgentClient(token)
    session = bot.session()
    made = bot.call(session, "pay_invoice", {"vendor": "acme", "amount": 950})
    assert made.status_code == 202
    return token, session, [made.json()]


async def test_an_operator_cancelling_the_session_wakes_its_waiting_calls():
    token, session, (call,) = await _db(_setup)()
    waiting = asyncio.ensure_future(waits.call_state(token, call["call"], 25))
    await _until(lambda: waits.listeners(wakeups.call_topic(call["call"])) == 1)

    @_db
    def cancel() -> None:
        Run.objects.get(pk=session).cancel(reason="stop")

    await cancel()
    # Long before its 25 s wait ends, and not by a safety read (switched off here).
    status, body = await asyncio.wait_for(waiting, ANSWER_WITHIN)
    assert (status, body["status"]) == (200, "cancelled")


@pytest.mark.services  # the Redis layer's capacities, and its decisions counter, too
def test_the_listening_channel_holds_a_burst_of_decisions():
    # The layer's default (100 in memory, 1 500 on Redis) dropped the rest of a burst
    # silently; the hub's channel has room for far more.
    layer = get_channel_layer()

    async def channels() -> tuple[str, str]:
        return await wakeups.new_hub_channel(layer), await layer.new_channel()

    hub, page = asyncio.run(channels())
    assert layer.get_capacity(hub) >= 10_000
    assert layer.get_capacity(page) < 10_000  # a live page's is the default


@pytest.mark.services  # channels_redis's receiving of a process's channels
async def test_a_waiting_agent_does_not_hold_up_the_live_pages_messages():
    # The hub's channel had a prefix of its own: the layer's one receive lock per process
    # then went to the hub's blocking pop (up to 5 s) between each of the pages' own.
    token, _, (call,) = await _db(_setup)()
    waiting = asyncio.ensure_future(waits.call_state(token, call["call"], 25))
    await _until(lambda: waits.listeners(wakeups.call_topic(call["call"])) == 1)
    layer = get_channel_layer()
    page = await layer.new_channel()
    await layer.group_add("test.live-page", page)
    took = []
    for _ in range(4):
        receiving = asyncio.ensure_future(layer.receive(page))
        await asyncio.sleep(0.2)  # the hub is listening meanwhile, as it always is
        sent = time.monotonic()
        await layer.group_send("test.live-page", {"type": "run.changed"})
        await asyncio.wait_for(receiving, 5.5)
        took.append(time.monotonic() - sent)
    assert max(took) < 0.5, took
    await layer.group_discard("test.live-page", page)
    assert not waiting.done()  # the agent waited all along
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)


@pytest.mark.services
async def test_a_lost_decision_message_makes_every_waiter_read_again(reads, monkeypatch):
    monkeypatch.setattr(waits, "GAP_GRACE_SECONDS", 0.2)
    token, _, (lost, noticed, other) = await _db(_setup)(3)
    real_send, dropped = wakeups.events.send, []

    def send(group, message, **kwargs):
        if group == wakeups.DECISIONS_GROUP and not dropped:
            dropped.append(message)  # lost on the way (a full channel, say)
            return
        real_send(group, message, **kwargs)

    monkeypatch.setattr(wakeups.events, "send", send)
    waiting = {
        c["call"]: asyncio.ensure_future(waits.call_state(token, c["call"], 25))
        for c in (lost, noticed, other)
    }
    await _until(lambda: len(reads) == 3)
    await _db(_decide)(lost["approval"])
    assert dropped and dropped[0]["call"] == lost["call"]
    await asyncio.sleep(0.5)
    assert not waiting[lost["call"]].done()  # nothing told it (the safety timer is off)
    # The next decision's message shows a number skipped: every waiter reads again.
    await _db(_decide)(noticed["approval"])
    status, body = await asyncio.wait_for(waiting[lost["call"]], ANSWER_WITHIN)
    assert (status, body["status"]) == (200, "approved")
    assert (await waiting[noticed["call"]])[1]["status"] == "approved"
    await _until(lambda: reads[other["call"]] == 2)  # read again, still pending
    assert not waiting[other["call"]].done()
    waiting[other["call"]].cancel()
    await asyncio.gather(waiting[other["call"]], return_exceptions=True)


def test_numbers_that_come_late_are_not_lost_and_a_skipped_one_is():
    gaps = waits._Gaps()
    gaps.start(10)  # the counter when the process joined
    for number in (9, 12, 11, 13):  # 9: numbered before it joined; 12 passed 11 on the way
        gaps.saw(number, now=0.0)
    assert gaps.overdue(now=10.0) == 0
    gaps.saw(15, now=10.0)  # 14 skipped
    assert gaps.overdue(now=10.0 + waits.GAP_GRACE_SECONDS / 2) == 0  # may still come
    assert gaps.overdue(now=10.0 + waits.GAP_GRACE_SECONDS) == 1
    assert gaps.overdue(now=20.0) == 0  # reported once
    unread = waits._Gaps()
    unread.start(None)  # the counter could not be read: nothing is judged
    unread.saw(50, now=0.0)
    assert unread.overdue(now=10.0) == 0
