"""One feed per watched run per process (runs/feeds.py): the sockets watching a run share its
group membership, its renders and its database safety net, and each still gets every step
once and in order."""

import asyncio

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels_redis.core import RedisChannelLayer

from runs import events, feeds

from .factories import add_steps
from .test_consumers import _append_quietly, connect, receive_through

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


@pytest.fixture
def reads(monkeypatch) -> list[int]:
    """The seqs each read of the database that found steps started after."""
    found: list[int] = []
    read = feeds.steps_after

    async def counted(run_id, seq):
        batch = await read(run_id, seq)
        if batch:
            found.append(seq)
        return batch

    monkeypatch.setattr(feeds, "steps_after", counted)
    return found


async def members(group: str) -> set[str]:
    layer = get_channel_layer()
    if isinstance(layer, RedisChannelLayer):
        key = layer._group_key(group)
        return {m.decode() for m in await layer.connection(0).zrange(key, 0, -1)}
    return set(layer.groups.get(group, ()))


async def watchers(run, user, n: int) -> list:
    out = []
    for _ in range(n):
        communicator, connected = await connect(f"/ws/runs/{run.pk}/?after=5", user)
        assert connected
        out.append(communicator)
    return out


async def test_sockets_watching_a_run_share_one_membership(run, viewer, operator):
    sockets = await watchers(run, viewer, 3)
    # The feed's channel, not one per socket.
    assert await members(events.run_group(run.pk)) == {feeds._feeds[str(run.pk)].channel}

    await sync_to_async(add_steps)(run, 1)
    for socket in sockets:
        assert await receive_through(socket, 6) == [6]

    for socket in sockets:
        await socket.disconnect()
    assert await members(events.run_group(run.pk)) == set()
    assert not feeds._feeds


async def test_their_safety_net_reads_the_database_once_for_all(run, viewer, reads, monkeypatch):
    monkeypatch.setattr(feeds, "CATCH_UP_POLL_SECONDS", 0.1)
    sockets = await watchers(run, viewer, 3)
    # Steps committed while no event could be sent: only the re-read finds them.
    await sync_to_async(_append_quietly)(run, 2)
    for socket in sockets:
        assert await receive_through(socket, 7) == [6, 7]
    assert reads == [5]  # one read, not one per socket
    for socket in sockets:
        await socket.disconnect()


async def test_a_gap_is_filled_once_for_all(run, viewer, reads):
    sockets = await watchers(run, viewer, 3)
    # Steps 6 and 7 commit but only 7's event arrives (6's was lost).
    await sync_to_async(_append_quietly)(run, 2)
    await get_channel_layer().group_send(
        events.run_group(run.pk), {"type": "run.step", "seq": 7, "kind": "tool"}
    )
    for socket in sockets:
        assert await receive_through(socket, 7) == [6, 7]
    assert reads == [5]
    for socket in sockets:
        await socket.disconnect()


async def test_a_socket_catching_up_while_steps_arrive_gets_each_once(run, viewer, monkeypatch):
    read = feeds.steps_after
    reads: list[int] = []

    async def racing(run_id, seq):
        # The socket's own read ends before steps 6 and 7 commit; 7's event reaches it while
        # it is still catching up and 6's is lost: what it holds does not follow on.
        batch = await read(run_id, seq)
        reads.append(seq)
        if len(reads) == 1:
            await sync_to_async(_append_quietly)(run, 1)
            await sync_to_async(add_steps)(run, 1)
            [socket] = feeds._feeds[str(run.pk)].sockets
            while not socket.held:
                await asyncio.sleep(0.01)
        return batch

    monkeypatch.setattr(feeds, "steps_after", racing)
    communicator, connected = await connect(f"/ws/runs/{run.pk}/?after=3", viewer)
    assert connected
    assert await receive_through(communicator, 7) == [4, 5, 6, 7]
    assert reads[:2] == [3, 5]  # it read again from where the first read ended
    await sync_to_async(add_steps)(run, 1)
    assert await receive_through(communicator, 8) == [8]
    await communicator.disconnect()


async def test_sockets_opening_a_run_at_once_share_one_catch_up_read(run, viewer, reads):
    opened = await asyncio.gather(
        *(connect(f"/ws/runs/{run.pk}/?after=3", viewer) for _ in range(5))
    )
    assert all(connected for _, connected in opened)
    for socket, _ in opened:
        assert await receive_through(socket, 5) == [4, 5]
    assert reads == [3]  # one read for the five, not five one after another
    await sync_to_async(add_steps)(run, 1)
    for socket, _ in opened:
        assert await receive_through(socket, 6) == [6]
        await socket.disconnect()


async def test_a_read_made_before_a_step_came_is_not_shared(run, viewer, reads):
    first, connected = await connect(f"/ws/runs/{run.pk}/?after=3", viewer)
    assert connected and await receive_through(first, 5) == [4, 5]
    await sync_to_async(add_steps)(run, 1)
    assert await receive_through(first, 6) == [6]
    # Step 6 came after the first socket's read: a socket opening now reads for itself.
    second, connected = await connect(f"/ws/runs/{run.pk}/?after=3", viewer)
    assert connected and await receive_through(second, 6) == [4, 5, 6]
    assert reads == [3, 3]
    for socket in (first, second):
        await socket.disconnect()


async def test_a_socket_that_leaves_stops_getting_steps_and_the_others_go_on(run, viewer):
    staying, leaving = await watchers(run, viewer, 2)
    await leaving.disconnect()
    await sync_to_async(add_steps)(run, 1)
    assert await receive_through(staying, 6) == [6]
    assert len(feeds._feeds) == 1
    await staying.disconnect()


async def test_a_hand_out_lets_the_loop_write_between_batches():
    # A send only buffers; the loop writes on its next turn. The first watchers' bytes must
    # not wait for the hundredth watcher's send.
    got = []

    class Watcher:
        last_seq, catching_up = 0, False

        async def take(self, payloads):
            got.append(self)

    sockets = [Watcher() for _ in range(3 * feeds.HAND_OUT_BATCH)]
    feed = await feeds.join("00000000-0000-0000-0000-000000000001", sockets[0])
    feed.sockets.update(sockets)
    asyncio.get_running_loop().call_soon(got.append, "the loop's turn")
    await feed._hand_out([{"seq": 1}])
    assert got.index("the loop's turn") == feeds.HAND_OUT_BATCH
    assert len(got) == len(sockets) + 1
    for socket in sockets:
        await feeds.leave(feed, socket)


async def test_a_feed_receives_again_after_the_channel_layer_failed(run, viewer, monkeypatch):
    layer = get_channel_layer()
    receive = layer.receive
    failed = []

    async def failing_once(channel):
        feed_channels = {getattr(f, "channel", None) for f in feeds._feeds.values()}
        if channel in feed_channels and not failed:
            failed.append(channel)
            raise ConnectionError("the channel layer is unreachable")
        return await receive(channel)

    monkeypatch.setattr(layer, "receive", failing_once)
    [socket] = await watchers(run, viewer, 1)
    await sync_to_async(add_steps)(run, 1)
    assert await receive_through(socket, 6) == [6]
    assert failed
    await socket.disconnect()
