"""One feed per watched run per web process: every socket here that watches the run gets its
steps through the feed's one membership in the run's group, rendered once, and the database
safety net (the periodic re-read, the filling of a gap) runs once for all of them.
Why and how: docs/design/modules.md."""

import asyncio
import logging
from typing import Protocol

from channels.layers import get_channel_layer

from agentkit.database import any_thread

from . import events, live, rendering
from .models import Run, Step

log = logging.getLogger("agentops.live")

# Steps read from the database at once (a reconnect after a long absence reads several).
CATCH_UP_MAX = 500
# Live events are best effort: one sent while the worker could not reach Redis is lost, and a
# lost *last* event (the run finished) is never followed by one that reveals the gap. So a
# watched run is also re-read this often (one indexed query when nothing is new).
CATCH_UP_POLL_SECONDS = 10.0
# Sockets handed a step before the feed lets the event loop write to them: a send only
# buffers (Twisted writes on the loop's next turn), so without a pause the first watcher's
# bytes waited for the hundredth watcher's send.
HAND_OUT_BATCH = 10
# A catch-up read is shared with sockets that ask for the same steps this long after it began
# (and before any step came): past that, a socket reads for itself.
SHARE_READ_SECONDS = 2.0


class Watcher(Protocol):
    last_seq: int
    catching_up: bool

    async def take(self, payloads: list[dict]) -> None:
        """Steps in seq order, starting at or before last_seq + 1."""

    async def take_draft(self, payload: dict) -> None:
        """The newest draft of the model's text for the step payload["seq"]."""


class RunFeed:
    def __init__(self, run_id: str):
        self.run_id = run_id
        self.group = events.run_group(run_id)
        self.layer = get_channel_layer()
        self.sockets: set[Watcher] = set()
        # The newest draft whose step has not been handed out (a draft payload), or None.
        self.draft: dict | None = None
        # Live events and the poll both deliver; one at a time keeps seqs in order.
        self.delivering = asyncio.Lock()
        self.tasks: list[asyncio.Task] = []
        # Catch-up reads the sockets share (shared_steps_after): after seq -> (read, begun).
        self.reads: dict[int, tuple[asyncio.Future, float]] = {}
        self.started = asyncio.ensure_future(self._start())

    async def _start(self) -> None:
        self.channel = await self.layer.new_channel()
        await self.layer.group_add(self.group, self.channel)
        self.tasks = [
            asyncio.ensure_future(self._receive()),
            asyncio.ensure_future(self._poll()),
        ]

    async def stop(self) -> None:
        if not self.started.done():
            self.started.cancel()
            return
        for task in self.tasks:
            task.cancel()
        if not self.started.cancelled() and self.started.exception() is None:
            await self.layer.group_discard(self.group, self.channel)

    async def _receive(self) -> None:
        while True:
            try:
                event = await self.layer.receive(self.channel)
            except Exception:
                # Redis unreachable: the poll still delivers meanwhile; a socket's own receive
                # failing closed the socket, the feed has to outlast it.
                log.exception("receiving run %s's live events failed", self.run_id)
                await asyncio.sleep(1.0)
                continue
            kind = event.get("type")
            if kind not in ("run.step", "run.draft"):
                continue
            if kind == "run.step":
                self.reads.clear()  # a step came: a read made before may not have it
            try:
                async with self.delivering:
                    if kind == "run.step":
                        await self._on_step(event)
                    else:
                        await self._on_draft(event)
            except Exception:
                log.exception(
                    "live %s %s of run %s not delivered", kind, event.get("seq"), self.run_id
                )

    async def _on_step(self, event: dict) -> None:
        seq = event["seq"]
        if self.draft is not None and seq >= self.draft["seq"]:
            self.draft = None  # even if no socket needs the step (they read it themselves)
        if all(not s.catching_up and s.last_seq >= seq for s in self.sockets):
            return  # a repeated event
        need = self._oldest_seq()
        if need is not None and need < seq - 1:
            # A gap (a lost or merged event): the steps in between from the database, once.
            await self._catch_up(need)
            return
        await self._hand_out([await live.step_payload(event)])

    async def _on_draft(self, event: dict) -> None:
        if self.draft is not None and self.draft["seq"] > event["seq"]:
            return  # an older model call's, late
        if any(s.last_seq >= event["seq"] for s in self.sockets if not s.catching_up):
            # Its step (or what took its seq: an error, a cancel) was handed out already.
            return
        self.draft = payload = await live.draft_payload(event)
        for socket in list(self.sockets):
            try:
                await socket.take_draft(payload)
            except Exception:
                log.exception("a live socket of run %s failed; dropped", self.run_id)
                self.sockets.discard(socket)

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(CATCH_UP_POLL_SECONDS)
            try:
                async with self.delivering:
                    need = self._oldest_seq()
                    if need is not None:
                        await self._catch_up(need)
                # Channels leave a group after its expiry; a feed may outlive every socket
                # that was there when it joined.
                await self.layer.group_add(self.group, self.channel)
            except Exception:
                log.exception("re-reading run %s for its live sockets failed", self.run_id)

    def _oldest_seq(self) -> int | None:
        """The newest seq every socket that is not catching up has."""
        return min((s.last_seq for s in self.sockets if not s.catching_up), default=None)

    async def _catch_up(self, after: int) -> None:
        async for batch in pages_after(self.run_id, after):
            await self._hand_out(batch)

    async def shared_steps_after(self, seq: int) -> list[dict]:
        """steps_after for a socket in this feed, shared with the other sockets that ask for
        the steps after the same seq: a run's page opened by 100 people at once is one read,
        not 100 one after another on the database thread while the first live step waits
        for the last of them (each socket holds live steps until its read is done).

        A socket may take a read begun before it joined only if no step has come to the feed
        since the read began (a step that comes clears them): a step the read missed was
        then committed after the read began, and its event, still to come, reaches this
        socket too. A lost event is the feed's poll's to make up, as for any socket."""
        now = asyncio.get_running_loop().time()
        shared = self.reads.get(seq)
        if shared is None or now - shared[1] > SHARE_READ_SECONDS:
            shared = self.reads[seq] = (asyncio.ensure_future(steps_after(self.run_id, seq)), now)
        read = shared[0]
        try:
            return await asyncio.shield(read)
        except Exception:
            if self.reads.get(seq, (None,))[0] is read:
                del self.reads[seq]
            raise

    async def _hand_out(self, payloads: list[dict]) -> None:
        self.reads.clear()  # steps moved on (the poll's found some): read afresh
        if self.draft is not None and payloads and payloads[-1]["seq"] >= self.draft["seq"]:
            self.draft = None  # its step (or what took its seq) is here
        for i, socket in enumerate(list(self.sockets), 1):
            if socket not in self.sockets:
                continue  # it left while the loop wrote to the ones before
            try:
                await socket.take(payloads)
            except Exception:
                # One broken socket must not keep the run's steps from the others.
                log.exception("a live socket of run %s failed; dropped", self.run_id)
                self.sockets.discard(socket)
            if i % HAND_OUT_BATCH == 0:
                await asyncio.sleep(0)


_loop: asyncio.AbstractEventLoop | None = None
_feeds: dict[str, RunFeed] = {}


async def join(run_id, socket: Watcher) -> RunFeed:
    """The run's feed, with `socket` in it, once the feed receives the run's events: what the
    socket reads from the database afterwards cannot miss a step committed meanwhile."""
    global _loop, _feeds
    loop = asyncio.get_running_loop()
    if loop is not _loop:
        _loop, _feeds = loop, {}
    run_id = str(run_id)
    feed = _feeds.get(run_id)
    if feed is None:
        feed = _feeds[run_id] = RunFeed(run_id)
    feed.sockets.add(socket)
    try:
        await asyncio.shield(feed.started)
    except BaseException:
        await leave(feed, socket)
        raise
    return feed


async def leave(feed: RunFeed, socket: Watcher) -> None:
    feed.sockets.discard(socket)
    if feed.sockets:
        return
    if _feeds.get(feed.run_id) is feed:
        del _feeds[feed.run_id]
    await feed.stop()


async def pages_after(run_id: str, seq: int, *, feed: RunFeed | None = None):
    """The run's steps after `seq` from the database as live payloads, a page at a time
    (for a socket in `feed`: reads shared with its other sockets)."""
    while True:
        batch = await (feed.shared_steps_after(seq) if feed else steps_after(run_id, seq))
        if batch:
            yield batch
            seq = batch[-1]["seq"]
        if len(batch) < CATCH_UP_MAX:
            return


@any_thread
def steps_after(run_id: str, seq: int) -> list[dict]:
    """The run's steps after `seq` (at most CATCH_UP_MAX) as live payloads, from the database."""
    steps = list(Step.objects.filter(run_id=run_id, seq__gt=seq).order_by("seq")[:CATCH_UP_MAX])
    if not steps:
        return []
    run = Run.objects.select_related("launched_by").get(pk=run_id)
    out = []
    for step in steps:
        # The header reflects the run now; sending it once, with the last step, is enough.
        payload = rendering.render_step_event(step, run, with_header=step is steps[-1])
        out.append({"seq": step.seq, "kind": step.kind, "run_id": str(step.run_id), **payload})
    return out
