"""The worker-side sender of live events (runs/events.py _Outbox)."""

import asyncio
import threading
import time

import pytest

from runs import events


class BlockingLayer:
    """A channel layer whose sends wait for the test to let them through."""

    def __init__(self):
        self.sent: list[tuple[str, dict]] = []
        self.gate = threading.Event()
        self.first_send_started = threading.Event()

    async def group_send(self, group: str, message: dict) -> None:
        self.first_send_started.set()
        while not self.gate.is_set():
            await asyncio.sleep(0.005)
        self.sent.append((group, message))


@pytest.fixture
def layer(monkeypatch):
    layer = BlockingLayer()
    monkeypatch.setattr(events, "get_channel_layer", lambda: layer)
    return layer


def wait_for(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.01)


def step(seq: int) -> dict:
    return {"type": "run.step", "run_id": "r1", "seq": seq, "kind": "tool"}


def test_events_waiting_behind_a_busy_sender_merge_per_run_in_order(layer):
    outbox = events._Outbox()
    outbox.put("run.r1", step(1), ("step", "r1"))
    assert layer.first_send_started.wait(5)  # seq 1 is being sent; the rest must wait
    for seq in (2, 3, 4):
        outbox.put("run.r1", step(seq), ("step", "r1"))
    outbox.put("run.r2", {**step(7), "run_id": "r2"}, ("step", "r2"))
    outbox.put("approvals.all", {"type": "approvals.changed", "event": "a"}, object())
    outbox.put("run.r1", step(5), ("step", "r1"))
    layer.gate.set()
    wait_for(lambda: len(layer.sent) == 4)
    assert [(g, m.get("seq"), m.get("first")) for g, m in layer.sent] == [
        ("run.r1", 1, None),
        ("run.r1", 5, 2),  # 2..5 in one event, where seq 2 was queued
        ("run.r2", 7, None),
        ("approvals.all", None, None),
    ]


def test_an_idle_sender_sends_each_event_as_it_comes(layer):
    layer.gate.set()
    outbox = events._Outbox()
    for seq in (1, 2, 3):
        outbox.put("run.r1", step(seq), ("step", "r1"))
        wait_for(lambda seq=seq: len(layer.sent) == seq)
    assert [m["seq"] for _, m in layer.sent] == [1, 2, 3]
    assert not any("first" in m for _, m in layer.sent)


def test_a_failing_layer_does_not_stop_the_sender(layer, monkeypatch):
    calls = []

    async def flaky(group, message):
        calls.append(message["seq"])
        if message["seq"] == 1:
            raise ConnectionError("redis went away")

    monkeypatch.setattr(layer, "group_send", flaky)
    outbox = events._Outbox()
    outbox.put("run.r1", step(1), object())
    wait_for(lambda: calls == [1])
    outbox.put("run.r1", step(2), object())
    wait_for(lambda: calls == [1, 2])


def test_event_data_is_serialised_only_for_groups_someone_listens_to(layer, monkeypatch):
    async def listened(_layer, groups):
        return {g for g in groups if g != "run.unwatched"}

    monkeypatch.setattr(events, "_groups_listened_to", listened)
    asked = []

    def later(name):
        def data():
            asked.append(name)
            return {"step": {"seq": 1}}

        return data

    layer.gate.set()
    outbox = events._Outbox()
    outbox.put("run.unwatched", step(1), object(), later("unwatched"))
    outbox.put("run.r1", step(1), object(), later("watched"))
    wait_for(lambda: len(layer.sent) == 1)
    assert asked == ["watched"]
    assert layer.sent == [("run.r1", {**step(1), "step": {"seq": 1}})]


def test_an_event_whose_data_fails_to_serialise_still_goes_out(layer):
    def broken() -> dict:
        raise ValueError("not serialisable")

    layer.gate.set()
    outbox = events._Outbox()
    outbox.put("run.r1", step(1), object(), broken)
    wait_for(lambda: len(layer.sent) == 1)
    assert layer.sent == [("run.r1", step(1))]  # the web process reads the database instead
