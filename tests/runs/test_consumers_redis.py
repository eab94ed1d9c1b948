"""The live timeline over the real Redis channel layer (runs when REDIS_URL is set).

redis-py 8 times out idle socket reads after 5 s, which silently dropped idle channels-redis
consumers (django/channels_redis#422): a watcher whose run was quiet for a while never got
the next step. settings.CHANNEL_LAYERS sets `socket_timeout: None` against that; this test
keeps a WebSocket idle longer than the 5 s and checks the next step still arrives.
"""

import asyncio

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels_redis.core import RedisChannelLayer
from django.conf import settings

from runs.models import Run

from .factories import add_steps, make_run
from .test_consumers import connect, seqs

pytestmark = [
    pytest.mark.redis,
    pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL=redis://…"),
    pytest.mark.django_db(transaction=True),
    pytest.mark.asyncio,
]

IDLE_SECONDS = 6  # longer than redis-py 8's 5 s default read timeout


async def test_an_idle_websocket_still_gets_the_next_step(operator, viewer, no_enqueue):
    assert isinstance(get_channel_layer(), RedisChannelLayer)
    run = await sync_to_async(make_run)(operator, status=Run.Status.RUNNING)
    await sync_to_async(add_steps)(run, 4)  # seq 1..5
    communicator, connected = await connect(f"/ws/runs/{run.pk}/?after=5", viewer)
    assert connected

    await asyncio.sleep(IDLE_SECONDS)  # the condition under test: nothing on the run's group

    await sync_to_async(add_steps)(run, 1)  # seq 6, published after commit via Redis
    # The first message is the new step: nothing (no replay of 1..5) came before it.
    live = await communicator.receive_from(timeout=30)
    assert seqs(live) == [6]
    await communicator.disconnect()


async def test_the_outbox_asks_which_groups_have_members_in_one_go():
    from runs import events

    layer = get_channel_layer()
    watched, unwatched, left = "run.watched-test", "run.unwatched-test", "run.left-test"
    await layer.group_add(watched, "specific.watcher!1")
    await layer.group_add(left, "specific.watcher!2")
    await layer.group_discard(left, "specific.watcher!2")
    try:
        listened = await events._groups_listened_to(layer, {watched, unwatched, left})
        assert listened == {watched}
    finally:
        await layer.group_discard(watched, "specific.watcher!1")
    assert await events._groups_listened_to(layer, {watched}) == set()
