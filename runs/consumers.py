"""Live streams for the browser. Authenticated (session), origin-checked (asgi.py), and each
checks the user may see what it streams. Handler names match the event `type`."""

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from accounts import teams, two_factor
from agentkit import metrics
from agentkit.database import any_thread

from . import access, events, feeds, live
from .models import Run

log = logging.getLogger("agentops.live")

# A socket re-checks its session and the user's role this often, whatever it was told
# (runs/access.py): no frame reaches a user more than 5 s after their access ended, even if
# the announcement was lost. Four indexed reads (session, user, roles, what it streams),
# shared by the sockets of one login watching the same thing in this process (AccessWatch).
ACCESS_CHECK_SECONDS = 4.0
# Closed because the user may no longer see: the browser does not reconnect (htmx's ws
# extension retries only 1006, 1011-1013) and a reload meets the login page.
CLOSE_FORBIDDEN = 4403


class WatchedAccess:
    """Who may watch is checked at connect and again whenever it may have changed: when the
    user's group announces it (a logout, deactivation, role removed) and every
    ACCESS_CHECK_SECONDS. A socket whose user may no longer see stops sending at once and
    closes."""

    access_ended = False
    admitted = False  # the access check at connect passed: from then on frames are sent
    # The consumer's, in the class this is mixed into (an AsyncJsonWebsocketConsumer).
    scope: dict[str, Any]
    channel_name: str
    channel_layer: Any
    close: Callable[..., Awaitable[None]]

    def may_see(self, user) -> bool:
        """Whether this user may see what this socket streams (sync: may read the database)."""
        raise NotImplementedError

    async def dispatch(self, message):
        # channels' dispatch first closes stale connections of asgiref's one thread_sensitive
        # thread: a hop to that thread for every message of every socket, queued behind each
        # other (a storm's connects, a broadcast's thousand deliveries). These consumers read
        # only through any_thread, whose calls close their own connection.
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    def _admitted(self, user) -> bool:
        # Read again once the user's group is joined: a sign-out committed before the join is
        # seen here, one after it is announced to the socket.
        now = access.session_user(self._session_key())
        if now is None or now.pk != user.pk:
            return False
        # Pages send such a person to enrol first (accounts/two_factor.py); sockets too.
        session = self.scope.get("session") or {}
        return not two_factor.must_enrol(now, session) and self.may_see(now)

    def watched(self) -> Hashable:
        """What may_see() is about: sockets of one session watching the same thing share
        their periodic re-check."""
        return f"{type(self).__module__}.{type(self).__qualname__}"

    def adopt(self, checked: "WatchedAccess | None") -> None:
        """Take what the shared re-check of `checked` (a socket like this one) read."""

    def has_session(self) -> bool:
        """Whether the socket came with a session cookie at all (no database read): one
        without is refused at the handshake."""
        return bool(self._session_key())

    async def admit(self) -> bool:
        """connect()'s access check, made once the handshake is accepted; False once it has
        refused (closed) the socket.

        Accepted first: daphne drops a handshake not answered within its
        --websocket_connect_timeout (5 s), and when a thousand browsers come back at once
        (a deploy, a network blip) their checks queued past it and every socket was refused
        (bench/reconnect_storm.py). Accepting costs no database read; until it is admitted
        the socket is sent nothing (send() below) and a refusal closes it with 4403, which
        the browser does not retry."""
        # Two calls on any thread (agentkit/database.py): sockets connecting at once are
        # checked side by side, not one after another on one thread.
        user = await any_thread(access.session_user)(self._session_key())
        if user is None:
            await self.end_access()
            return False
        self.scope["user"] = user
        # Joined before the check: a revocation committed in between still reaches us.
        self.user_group = events.user_group(user.pk)
        await self.channel_layer.group_add(self.user_group, self.channel_name)
        if not await any_thread(self._admitted)(user):
            await self.end_access()
            return False
        self.admitted = True
        return True

    def watch_access(self) -> None:
        """After accept(): the periodic re-check."""
        key = (self._session_key(), self.scope["user"].pk, self.watched())
        self.access_watch = AccessWatch.join(key, self)
        self.counted = metrics.websocket_connections.labels(self.stream())
        self.counted.inc()

    def stream(self) -> str:
        """What the socket streams, as the connections gauge labels it (run, dashboard...)."""
        return type(self).__name__.removesuffix("Consumer").lower()

    async def access_changed(self, event):
        session = event.get("session")
        if (session and session == self._session_digest()) or not await self._still_allowed():
            await self.end_access()

    def _session_digest(self) -> str:
        key = self._session_key()
        return access.session_digest(key) if key else ""

    def _session_key(self) -> str | None:
        return getattr(self.scope.get("session"), "session_key", None)

    async def _still_allowed(self) -> bool:
        return await any_thread(self._allowed_now)()

    def _allowed_now(self) -> bool:
        user = access.session_user(self._session_key())
        return user is not None and user.pk == self.scope["user"].pk and self.may_see(user)

    async def end_access(self) -> None:
        if self.access_ended:
            return
        # First: from here on nothing is sent, even an event already queued for this socket.
        self.access_ended = True
        self._unwatch_access()
        await self.stop_streaming()
        for group in self.joined_groups():
            await self.channel_layer.group_discard(group, self.channel_name)
        await self.close(code=CLOSE_FORBIDDEN)

    def _unwatch_access(self) -> None:
        watch = self.__dict__.pop("access_watch", None)
        if watch is not None:
            watch.leave(self)

    async def stop_streaming(self) -> None:
        """Leave what the socket streams from besides its groups."""

    def joined_groups(self) -> list[str]:
        return [g for g in (getattr(self, "group", ""), getattr(self, "user_group", "")) if g]

    async def leave(self) -> None:
        """disconnect(): stop the re-check, leave the groups."""
        counted = self.__dict__.pop("counted", None)
        if counted is not None:
            counted.dec()
        self._unwatch_access()
        await self.stop_streaming()
        for group in self.joined_groups():
            await self.channel_layer.group_discard(group, self.channel_name)

    async def send(self, text_data=None, bytes_data=None, close=False):
        if self.admitted and not self.access_ended:
            await super().send(  # type: ignore[misc]  # the consumer's, after this mixin
                text_data=text_data, bytes_data=bytes_data, close=close
            )

    async def send_json(self, content, close=False):
        if self.admitted and not self.access_ended:
            await super().send_json(content, close=close)  # type: ignore[misc]


class AccessWatch:
    """The periodic re-check of the sockets of one session that watch the same thing in
    this process: one check every ACCESS_CHECK_SECONDS for all of them (a hundred tabs or
    watchers of one login cost one, not a hundred), and all close when it fails. A socket
    joining has just been checked by connect(); the next tick re-checks it within the period.
    One registry per event loop, as runs/feeds.py."""

    _loop: asyncio.AbstractEventLoop | None = None
    _watches: dict[Hashable, "AccessWatch"] = {}

    def __init__(self, key: Hashable):
        self.key = key
        self.sockets: set[WatchedAccess] = set()
        self.task = asyncio.create_task(self._recheck())

    @classmethod
    def join(cls, key: Hashable, socket: WatchedAccess) -> "AccessWatch":
        loop = asyncio.get_running_loop()
        if loop is not cls._loop:
            cls._loop, cls._watches = loop, {}
        watch = cls._watches.get(key)
        if watch is None:
            watch = cls._watches[key] = cls(key)
        watch.sockets.add(socket)
        return watch

    def leave(self, socket: WatchedAccess) -> None:
        self.sockets.discard(socket)
        if not self.sockets:
            if self._watches.get(self.key) is self:
                del self._watches[self.key]
            if self.task is not asyncio.current_task():
                self.task.cancel()

    async def _recheck(self) -> None:
        # Sessions whose sockets opened together (a server restart) check at different times.
        await asyncio.sleep(ACCESS_CHECK_SECONDS * random.uniform(0.5, 1.0))
        while self.sockets:
            checked = next(iter(self.sockets))
            try:
                allowed = await checked._still_allowed()
            except Exception:
                # The database unreachable: try again next time, as a new socket would.
                log.exception("re-checking live sockets' access failed")
                allowed = True
            if not allowed:
                for socket in list(self.sockets):
                    await socket.end_access()
                return
            for socket in list(self.sockets):
                socket.adopt(checked)
            await asyncio.sleep(ACCESS_CHECK_SECONDS)


class RunConsumer(WatchedAccess, AsyncJsonWebsocketConsumer):
    """One run's timeline. The client says the last seq it has; it gets what it missed, then
    live steps, each exactly once. The live steps and the periodic re-read come from the
    run's feed (runs/feeds.py), shared by every socket of this process watching the run."""

    catching_up = True

    async def connect(self):
        events.remember_server_loop(asyncio.get_running_loop())
        self.run_id = self.scope["url_route"]["kwargs"]["run_id"]
        if not self.has_session():
            await self.close(code=CLOSE_FORBIDDEN)
            return
        await self.accept()
        if not await self.admit():
            return
        self.last_seq = _int(self._query().get("after"), 0)
        # What the feed hands over while this socket reads what it missed.
        self.held: list[dict] = []
        # Subscribe before reading: a step committed in between is then not lost, and the
        # seq check drops its duplicate.
        self.feed = await feeds.join(self.run_id, self)
        try:
            await self._catch_up()
        except BaseException:
            # disconnect() is not called for a connect() that failed.
            await self.stop_streaming()
            raise
        self.watch_access()

    async def disconnect(self, code):
        await self.leave()

    async def stop_streaming(self) -> None:
        feed = self.__dict__.pop("feed", None)
        if feed is not None:
            await feeds.leave(feed, self)

    async def take(self, payloads: list[dict]) -> None:
        if self.catching_up:
            self.held += payloads
            return
        for payload in payloads:
            await self._deliver(payload)

    async def _catch_up(self):
        """Everything after last_seq from the database, then what the feed handed over
        meanwhile. Held steps that do not follow on mean the read ended before they were
        committed: read again (a few times; a gap left after that the feed fills)."""
        for _ in range(3):
            async for batch in feeds.pages_after(self.run_id, self.last_seq, feed=self.feed):
                for payload in batch:
                    await self._deliver(payload)
            first = min((p["seq"] for p in self.held if p["seq"] > self.last_seq), default=None)
            if first is None or first == self.last_seq + 1:
                break
        while self.held:
            held, self.held = sorted(self.held, key=_seq), []
            for payload in held:
                await self._deliver(payload)
        # No await since the check above: from here on the feed delivers.
        self.catching_up = False
        # Mid-answer: the model's text so far, unless its step is among those just sent.
        draft = self.feed.draft
        if draft is not None and draft["seq"] > self.last_seq:
            await send_html_or_json(self, draft)

    async def take_draft(self, payload: dict) -> None:
        # While catching up, the feed keeps the newest draft for the end of the catch-up.
        if not self.catching_up and payload["seq"] > self.last_seq:
            await send_html_or_json(self, payload)

    async def _deliver(self, payload: dict):
        # Each step once and in order: what the socket has is dropped, and so is what would
        # leave a gap (the feed reads the steps in between from the database).
        if payload["seq"] != self.last_seq + 1:
            return
        self.last_seq = payload["seq"]
        await send_html_or_json(self, payload)

    def _query(self) -> dict:
        from urllib.parse import parse_qs

        raw = self.scope.get("query_string", b"").decode()
        return {k: v[-1] for k, v in parse_qs(raw).items()}

    def may_see(self, user) -> bool:
        return Run.objects.visible_to(user).filter(pk=self.run_id).exists()

    def watched(self) -> Hashable:
        return (type(self), str(self.run_id))


class GroupConsumer(WatchedAccess, AsyncJsonWebsocketConsumer):
    """One group's stream for any user with a role; subclasses name the group and render its
    events (DashboardConsumer here, approvals/consumers.py ApprovalsConsumer)."""

    group = ""
    agents = teams.NOTHING  # until may_see() has read them

    async def connect(self):
        events.remember_server_loop(asyncio.get_running_loop())
        if not self.has_session():
            await self.close(code=CLOSE_FORBIDDEN)
            return
        # Browsers get the rendered fragments; scripts and tests may ask for the summaries.
        self.as_json = b"format=json" in self.scope.get("query_string", b"")
        # Joined before the handshake is answered: a client that acts once its socket is open
        # misses no event (those arriving before the check below wait for its outcome).
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        if not await self.admit():
            return
        await self.send_current_state()
        self.watch_access()

    def may_see(self, user) -> bool:
        # The agents whose events reach this socket: read at connect and at each re-check.
        self.agents = teams.scope(user, teams.Power.VIEW)
        return user.can_view

    def adopt(self, checked: "WatchedAccess | None") -> None:
        if isinstance(checked, GroupConsumer) and checked is not self:
            self.agents = checked.agents

    async def send_current_state(self) -> None:
        """After subscribing: what changed between the page render and the subscription."""

    async def disconnect(self, code):
        await self.leave()

    async def forward(self, event):
        if self.as_json:
            summary = live.summary(event)
            await self.send_json({k: v for k, v in summary.items() if k not in ("type", "html")})
        else:
            await send_html_or_json(self, await self.rendered(event))

    async def rendered(self, event: dict) -> dict:
        """The event with its HTML (runs/live.py renders it once per process)."""
        return event


class DashboardConsumer(GroupConsumer):
    """Runs list and dashboard rows."""

    group = events.DASHBOARD_GROUP

    async def rendered(self, event: dict) -> dict:
        return await live.run_payload(event)

    async def run_changed(self, event):
        if self.agents.allows(event.get("agent", "")):
            await self.forward(event)


async def send_html_or_json(consumer: AsyncJsonWebsocketConsumer, event: dict) -> None:
    """The fragment(s) rendered once per process by runs/live.py, one WebSocket message
    each; every viewer gets the same bytes. Without HTML, the event itself as JSON."""
    html = event.get("html")
    if html is None:
        await consumer.send_json({k: v for k, v in event.items() if k != "type"})
        return
    for part in [html] if isinstance(html, str) else html:
        await consumer.send(text_data=part)


def _seq(payload: dict) -> int:
    return payload["seq"]


def _int(value, default: int) -> int:
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return default
