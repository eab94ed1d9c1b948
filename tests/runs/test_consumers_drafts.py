"""Drafts of the model's text on a run's socket (runs/feeds.py, runs/consumers.py): pushed
live, the draft so far to a socket that connects mid-answer, and never once the step it
stands for is there."""

import re

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels_redis.core import RedisChannelLayer
from django.conf import settings

from runs import events

from .factories import XSS, add_steps
from .test_consumers import connect, receive_through, receive_until, seqs

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


def draft_of(message: str) -> tuple[int, str] | None:
    """(seq, text) of a draft message, None for anything else."""
    found = re.search(
        r'<article id="draft"[^>]*data-draft-seq="(\d+)".*?<pre>(.*?)</pre>', message, re.S
    )
    return (int(found[1]), found[2]) if found else None


publish_draft = sync_to_async(events.publish_draft)


async def test_drafts_are_pushed_live_then_the_step_and_no_draft_after_it(run, viewer):
    watcher, connected = await connect(f"/ws/runs/{run.pk}/?after=5", viewer)
    assert connected

    # One at a time: over Redis, drafts of a step that wait in the worker's outbox merge
    # into the newest (by design), so two sent at once may arrive as one.
    await publish_draft(run.pk, 6, "Let me")
    assert draft_of(await watcher.receive_from(timeout=5)) == (6, "Let me")
    await publish_draft(run.pk, 6, "Let me look " + XSS)
    second = await watcher.receive_from(timeout=5)
    seq, text = draft_of(second)
    # Untrusted text: escaped, never markup of its own.
    assert seq == 6 and "<script" not in second and "<img" not in second
    assert "&lt;script&gt;" in text and 'hx-swap-oob="true">999' not in second
    assert 'hx-swap-oob="true"' in second.split(">", 1)[0]  # only the draft itself swaps

    # The step arrives; a draft of it sent late (merged, delayed) is not passed on.
    await sync_to_async(add_steps)(run, 1)
    assert await receive_through(watcher, 6) == [6]
    await publish_draft(run.pk, 6, "Let me look, stale")
    await sync_to_async(add_steps)(run, 1)
    messages = await receive_until(watcher, lambda m: 7 in seqs(m))
    assert [draft_of(m) for m in messages] == [None]
    await watcher.disconnect()


async def test_a_socket_that_connects_mid_answer_gets_the_draft_so_far(run, viewer):
    watcher, _ = await connect(f"/ws/runs/{run.pk}/?after=5", viewer)
    await publish_draft(run.pk, 6, "Half of")
    await publish_draft(run.pk, 6, "Half of the answer")
    await receive_until(watcher, lambda m: draft_of(m) == (6, "Half of the answer"))

    # A reload (after=5) and a new page (after=0): the steps it lacks, then the text so far.
    reloaded, _ = await connect(f"/ws/runs/{run.pk}/?after=5", viewer)
    assert draft_of(await reloaded.receive_from(timeout=5)) == (6, "Half of the answer")
    fresh, _ = await connect(f"/ws/runs/{run.pk}/?after=0", viewer)
    messages = await receive_until(fresh, lambda m: draft_of(m) is not None)
    assert [s for m in messages for s in seqs(m)] == [1, 2, 3, 4, 5]
    assert draft_of(messages[-1]) == (6, "Half of the answer")

    # Drafts go on to every socket.
    await publish_draft(run.pk, 6, "Half of the answer, and more")
    for socket in (watcher, reloaded, fresh):
        assert draft_of(await socket.receive_from(timeout=5)) == (6, "Half of the answer, and more")
    for socket in (watcher, reloaded, fresh):
        await socket.disconnect()


async def test_after_the_step_a_reconnect_gets_the_step_only(run, viewer):
    watcher, _ = await connect(f"/ws/runs/{run.pk}/?after=5", viewer)
    await publish_draft(run.pk, 6, "The whole answer")
    await receive_until(watcher, lambda m: draft_of(m) is not None)
    await sync_to_async(add_steps)(run, 1)
    await receive_through(watcher, 6)

    reloaded, _ = await connect(f"/ws/runs/{run.pk}/?after=5", viewer)
    await sync_to_async(add_steps)(run, 1)  # a marker: everything before it has arrived
    messages = await receive_until(reloaded, lambda m: 7 in seqs(m))
    assert [s for m in messages for s in seqs(m)] == [6, 7]
    assert not any(draft_of(m) for m in messages)
    await watcher.disconnect()
    await reloaded.disconnect()


async def test_a_draft_whose_step_was_read_from_the_database_is_not_shown(run, viewer):
    # The step is committed before its draft reaches a feed that has just started: the
    # socket has the step from its catch-up, and the draft must not follow it.
    await sync_to_async(add_steps)(run, 1)  # seq 6
    socket, _ = await connect(f"/ws/runs/{run.pk}/?after=5", viewer)
    assert await receive_through(socket, 6) == [6]
    await publish_draft(run.pk, 6, "late")
    await publish_draft(run.pk, 8, "the next answer")
    assert draft_of(await socket.receive_from(timeout=5)) == (8, "the next answer")
    await socket.disconnect()


@pytest.mark.redis
@pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL=redis://…")
async def test_over_redis_a_burst_of_drafts_ends_with_the_whole_text(run, viewer):
    # Through the worker's outbox: drafts queued while it sends merge into the newest, and
    # each carries the whole text so far, so the last one a socket gets is complete.
    assert isinstance(get_channel_layer(), RedisChannelLayer)
    socket, _ = await connect(f"/ws/runs/{run.pk}/?after=5", viewer)
    words = [f"w{i}" for i in range(200)]
    for i in range(1, len(words) + 1):
        events.publish_draft(run.pk, 6, " ".join(words[:i]))
    whole = " ".join(words)
    received = await receive_until(socket, lambda m: draft_of(m) == (6, whole))
    assert all(draft_of(m) and draft_of(m)[0] == 6 for m in received)
    texts = [draft_of(m)[1] for m in received]
    assert all(whole.startswith(t) for t in texts)
    await socket.disconnect()
