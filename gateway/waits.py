"""Waiting for a person's decision costs the waiting agent's server (almost) nothing.
Why and how: docs/design/modules.md."""

import asyncio
import hashlib
import json
import logging
import random
import re
import weakref
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl
from uuid import UUID

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import DatabaseError
from django.http.request import split_domain_port, validate_host
from ninja.responses import NinjaJSONEncoder

from agentkit.database import DATABASE_DOWN_MESSAGE, DATABASE_RETRY_AFTER_SECONDS
from runs import events
from runs.models import Run, Step

from . import sessions
from .models import ExternalAgent, ExternalCall
from .wakeups import DECISIONS_GROUP, call_topic, new_hub_channel, numbering, session_topic

log = logging.getLogger("agentops.gateway")

MAX_WAIT_SECONDS = 30
# A long-poll still pending ends after its `wait` less up to this fraction of it, at random:
# a thousand agents that began waiting together (a restart) would otherwise all time out and
# ask again in the same instant, every MAX_WAIT_SECONDS, and a person's request meeting that
# wave waited behind it. Never longer than asked (a client's timeout is set just above).
WAIT_JITTER = 0.2
# A waiter re-reads the database this often even if no message came (one was lost).
RECHECK_SECONDS = 60.0
# A call read pending, with no message about it since, is known pending this long: an agent
# asking again within it is answered without a read. A missed message forgets everything at
# once: Redis away, or a message number that never came (_Gaps).
KNOWN_PENDING_SECONDS = 300.0
KEEPALIVE_SECONDS = 15.0  # an SSE comment line: proxies do not cut a quiet stream
# A number a publisher skipped (gateway/wakeups.py numbers its messages) and that has not come
# within this long was lost, not late: one process's sends may pass each other by a little.
GAP_GRACE_SECONDS = 2.0
# After a loss every waiter reads again, spread over up to this long (a millisecond a
# waiter): 10 000 reads at once would queue behind each other for the pool.
RECHECK_SPREAD_SECONDS = 10.0
RECHECK = "gateway.recheck"

CALL_PATH = re.compile(r"^/api/external/calls/(?P<id>[0-9a-fA-F-]{32,36})$")
EVENTS_PATH = re.compile(r"^/api/external/sessions/(?P<id>[0-9a-fA-F-]{32,36})/events$")


# --- reading (each read: one thread hop, its connection given back at once) ---------------
def _db(fn: Callable[..., Any], *, own_thread: bool = False) -> Callable[..., Awaitable[Any]]:
    # Any executor thread will do, and channels' wrapper closes the connection after the
    # call (CONN_MAX_AGE 0: back to the pool), so nothing is kept. `own_thread`: the
    # request's own thread and connection instead, for a view Django serves (its
    # middleware gave it a thread already; the test client's transaction lives there).
    if own_thread:
        return sync_to_async(fn, thread_sensitive=True)
    return database_sync_to_async(fn, thread_sensitive=False)


Answer = tuple[int, dict]


def _agent(token: str) -> ExternalAgent | None:
    return ExternalAgent.authenticate(token) if token else None


def _unauthorized(token: str) -> Answer:
    """401; for the token of an agent switched off, saying so: the request was waiting on a
    call that the deactivation cancelled, and the agent is told why it will not be decided."""
    inactive = ExternalAgent.deactivated(token) if token else None
    if inactive is not None:
        return 401, {"detail": sessions.deactivated_reason(inactive.slug), "deactivated": True}
    return 401, {"detail": "authentication required: the agent's bearer token"}


def read_call(token: str, call_id: str) -> Answer:
    """(HTTP status, body) of the call as the agent holding `token` may see it."""
    agent = _agent(token)
    if agent is None:
        return _unauthorized(token)
    call = (
        ExternalCall.objects.select_related("run")
        .filter(pk=call_id, run__agent=agent.slug, run__trigger=Run.Trigger.EXTERNAL)
        .first()
    )
    if call is None:
        return 404, {"detail": "no such call"}
    try:
        body = sessions.state_of(call).as_dict()
    except sessions.SessionError as exc:
        return exc.status, {"detail": exc.message}
    body["created_at"] = call.created_at.isoformat()
    # The agent's own id for the call, as it submitted it (its key is "<agent slug>:<id>").
    body["call_id"] = call.client_key.partition(":")[2] or None
    body["reported"] = sessions.reported(call)
    return 200, body


def read_session_events(token: str, session_id: str, after: int) -> Answer:
    """(HTTP status, {"events": [(id, state)], "closed": status or None}): the session's
    calls decided in steps after `after`, in order."""
    agent = _agent(token)
    if agent is None:
        return _unauthorized(token)
    run = Run.objects.filter(pk=session_id, trigger=Run.Trigger.EXTERNAL, agent=agent.slug).first()
    if run is None:
        return 404, {"detail": "no such session"}
    steps = list(
        run.steps.filter(kind=Step.Kind.DECISION, seq__gt=after)
        .order_by("seq")
        .values_list("seq", "data")
    )
    final = {d["approval"]: seq for seq, d in steps if d.get("status") not in (None, "pending")}
    calls = ExternalCall.objects.select_related("run").filter(approval_id__in=list(final))
    found = [(final[str(c.approval_id)], sessions.state_of(c).as_dict()) for c in calls]
    closed = run.status if run.is_terminal else None
    return 200, {"events": sorted(found, key=lambda e: e[0]), "closed": closed, "seq": run.last_seq}


# --- waiting -------------------------------------------------------------------------------
class _Gaps:
    """The numbers (gateway/wakeups.py numbers every decision message) above the counter's
    value when this process joined that have not reached it: a message dropped on the way
    (a full channel, an outbox that gave up while Redis was away, an expiry) shows as a
    number that never comes."""

    def __init__(self) -> None:
        self.high: int | None = None  # None: the counter was unreadable, nothing is judged
        self.missing: dict[int, float] = {}  # number -> noticed missing at

    def start(self, base: int | None) -> None:
        self.high, self.missing = base, {}

    def saw(self, number: int, now: float) -> None:
        if self.high is None:
            return
        if number > self.high:
            # Bounded: a huge jump is as lost as a small one; one entry stands for the rest.
            for skipped in range(self.high + 1, min(number, self.high + 1 + 1_000)):
                self.missing[skipped] = now
            self.high = number
        else:
            self.missing.pop(number, None)  # late, not lost

    def overdue(self, now: float) -> int:
        """How many skipped numbers are past their grace (each reported once)."""
        lost = [n for n, noticed in self.missing.items() if now - noticed >= GAP_GRACE_SECONDS]
        for number in lost:
            del self.missing[number]
        return len(lost)


class _Hub:
    """Every wait of a process (of an event loop) listens through one channel: the process
    joins DECISIONS_GROUP once and a single receive loop, never cancelled, hands each
    decision to the waiters of its call or session, kept in a dict. A wait that begins or
    ends touches that dict only: no round trip, no lock, whatever the number of waiters.

    (A group per call cost a Redis round trip at each wait's start and end, under a lock
    that kept them in order: with thousands of agents asking again every 30 s the lock's
    queue grew without end, and a decided call's answer waited behind it for seconds.)"""

    def __init__(self) -> None:
        self.layer = get_channel_layer()
        self.channel = ""
        self.waiters: dict[str, set[asyncio.Queue]] = {}
        self.listening: asyncio.Future | None = None
        self.tasks: set[asyncio.Task] = set()
        # Calls read pending while the process was in the group, with no decision about them
        # received since: topic -> (token digest, when read, the pending answer), oldest
        # first. A message about the call, or any doubt that one was missed, forgets them.
        self.pending: dict[str, tuple[bytes, float, dict]] = {}
        self.joined = False
        self.epoch = 0  # changes whenever a message may have been missed
        self.gaps = _Gaps()

    def known_pending(self, topic: str, token: str) -> dict | None:
        """The call's pending answer, if this process knows nothing changed since it read it
        (for this token) less than KNOWN_PENDING_SECONDS ago."""
        entry = self.pending.get(topic)
        if entry is None or entry[0] != _digest(token):
            return None
        if asyncio.get_running_loop().time() - entry[1] > KNOWN_PENDING_SECONDS:
            return None
        return entry[2]

    def remember_pending(self, topic: str, token: str, body: dict, read_at: float) -> None:
        self.pending.pop(topic, None)
        self.pending[topic] = (_digest(token), read_at, body)
        too_old = asyncio.get_running_loop().time() - KNOWN_PENDING_SECONDS
        while self.pending:
            oldest = next(iter(self.pending))
            if self.pending[oldest][1] >= too_old:
                break
            del self.pending[oldest]

    def doubt(self) -> None:
        """A message may have been missed: nothing read before is known any more."""
        self.epoch += 1
        self.pending.clear()

    def missed(self, lost: int) -> None:
        """Messages were lost: nothing is known any more, and every waiter reads again now,
        not when its safety timer or its agent's next ask comes (minutes, for a call this
        process knew pending)."""
        waiting = sum(len(inboxes) for inboxes in self.waiters.values())
        log.warning(
            "gateway: %d decision message(s) lost on the way; %d waiting calls read again",
            lost,
            waiting,
        )
        self.doubt()
        loop = asyncio.get_running_loop()
        spread = min(RECHECK_SPREAD_SECONDS, waiting / 1000)
        for topic, inboxes in self.waiters.items():
            message = {"type": RECHECK, "topics": [topic]}
            for inbox in inboxes:
                loop.call_later(random.uniform(0, spread), inbox.put_nowait, message)

    async def join(self, topic: str) -> asyncio.Queue:
        if self.listening is None:
            self.listening = asyncio.get_running_loop().create_future()
            self.tasks.add(asyncio.ensure_future(self._listen()))
        # Only the first waiters of the process wait here (for the membership to be made).
        await asyncio.shield(self.listening)
        # Nothing awaited from here on: a waiter cancelled above is in no set.
        inbox: asyncio.Queue = asyncio.Queue()
        self.waiters.setdefault(topic, set()).add(inbox)
        return inbox

    def leave(self, topic: str, inbox: asyncio.Queue) -> None:
        members = self.waiters.get(topic)
        if members is not None:
            members.discard(inbox)
            if not members:
                del self.waiters[topic]

    def count(self, topic: str) -> int:
        return len(self.waiters.get(topic, ()))

    async def _listen(self) -> None:
        try:
            self.channel = await new_hub_channel(self.layer)
            joined = await self._join_group()
        finally:
            self.listening.set_result(None)  # never leave the first waiters hanging
        self.tasks.add(asyncio.ensure_future(self._keep_joined(joined)))
        self.tasks.add(asyncio.ensure_future(self._watch_gaps()))
        while True:
            try:
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # Redis away: the waiters' safety timers still read
                log.warning("channel layer: receiving failed: %s", error)
                self.joined = False
                self.doubt()
                await asyncio.sleep(1.0)
                await self._join_group()  # a Redis that restarted empty forgot us
                continue
            if "n" in message:
                self.gaps.saw(message["n"], asyncio.get_running_loop().time())
            for topic in message.get("topics", ()):
                self.pending.pop(topic, None)
                for inbox in self.waiters.get(topic, ()):
                    inbox.put_nowait(message)

    async def _watch_gaps(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(GAP_GRACE_SECONDS / 2)
            if self.gaps.missing and (lost := self.gaps.overdue(loop.time())):
                self.missed(lost)

    async def _join_group(self) -> bool:
        try:
            await self.layer.group_add(DECISIONS_GROUP, self.channel)
        except Exception as error:
            log.warning("channel layer: joining %s failed: %s", DECISIONS_GROUP, error)
            self.joined = False
            self.doubt()
            return False
        if not self.joined:
            # Every message numbered from now on is ours to receive.
            base = await asyncio.get_running_loop().run_in_executor(None, numbering.current)
            self.gaps.start(base)
        self.joined = True
        return True

    async def _keep_joined(self, joined: bool) -> None:
        # A membership lasts the layer's group_expiry (a day by default): renewed well
        # before it ends, and every second while joining fails.
        renew = min(3600.0, getattr(self.layer, "group_expiry", 86_400) / 4)
        while True:
            await asyncio.sleep(renew if joined else 1.0)
            joined = await self._join_group()


_hubs: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Hub]" = weakref.WeakKeyDictionary()


def _hub() -> _Hub:
    loop = asyncio.get_running_loop()
    hub = _hubs.get(loop)
    if hub is None:
        hub = _hubs[loop] = _Hub()
    return hub


def listeners(topic: str) -> int:
    """Waits of this process (this event loop) listening to `topic` now."""
    return _hub().count(topic)


class Listening:
    """Decisions about `topic` while the block lasts (join before reading the state)."""

    def __init__(self, topic: str):
        self.topic = topic
        self.inbox: asyncio.Queue | None = None

    async def __aenter__(self) -> "Listening":
        # Embedded: the in-memory layer's queues live on this loop (runs/events.send).
        events.remember_server_loop(asyncio.get_running_loop())
        self.inbox = await _hub().join(self.topic)
        return self

    async def __aexit__(self, *exc) -> None:
        _hub().leave(self.topic, self.inbox)

    async def next_message(self, timeout: float) -> dict | None:
        """The next message, or None after `timeout` seconds."""
        try:
            return await asyncio.wait_for(self.inbox.get(), max(0.0, timeout))
        except TimeoutError:
            return None

    async def read_call(self, read: Callable[..., Awaitable[Answer]], token: str, call_id: str):
        """`read(token, call_id)`, remembered by the process while the call stays pending
        (only if the process listened throughout the read and no message came meanwhile)."""
        hub = _hub()
        began, epoch, joined = asyncio.get_running_loop().time(), hub.epoch, hub.joined
        status, body = await read(token, call_id)
        pending = status == 200 and body["status"] == sessions.PENDING
        if pending and joined and hub.epoch == epoch and self.inbox.empty():
            hub.remember_pending(self.topic, token, body, began)
        else:
            hub.pending.pop(self.topic, None)
        return status, body


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def jittered(wait: float) -> float:
    """How long a long-poll asked to wait `wait` seconds waits (see WAIT_JITTER)."""
    return wait * (1.0 - random.uniform(0.0, WAIT_JITTER))


def _safety_timer() -> float:
    # Jittered: waits that began together (a restart, a burst of calls) do not all read the
    # database in the same second.
    return RECHECK_SECONDS * random.uniform(0.75, 1.25)


async def call_state(token: str, call_id: str, wait: float, *, own_thread: bool = False) -> Answer:
    """The call's state, once it is no longer pending or after `wait` seconds."""
    read = _db(read_call, own_thread=own_thread)
    if wait <= 0:
        return await read(token, call_id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + jittered(wait)
    topic = call_topic(call_id)
    async with Listening(topic) as listening:
        # An agent asking again (every MAX_WAIT_SECONDS at most) about a call this process
        # read pending and heard nothing about since: no read. With 10 000 waiting calls,
        # reading at each ask was 333 reads a second, all of daphne's CPU.
        known = _hub().known_pending(topic, token)
        if known is not None:
            status, body = 200, known
        else:
            status, body = await listening.read_call(read, token, call_id)
        while status == 200 and body["status"] == sessions.PENDING:
            left = deadline - loop.time()
            if left <= 0:
                break
            message = await listening.next_message(min(left, _safety_timer()))
            if message is None and loop.time() >= deadline:
                break  # pending still
            status, body = await listening.read_call(read, token, call_id)  # woken, or timer
    return status, body


# --- the ASGI endpoints ----------------------------------------------------------------------
def route(scope: dict) -> Callable | None:
    """The endpoint serving this HTTP request outside Django, or None (Django serves it)."""
    if scope.get("method") != "GET":
        return None
    path = scope.get("path", "")
    if CALL_PATH.match(path):
        return long_poll
    if EVENTS_PATH.match(path):
        return session_events
    return None


def _headers(scope: dict) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def _query(scope: dict) -> dict[str, str]:
    return dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))


async def _respond(send, status: int, body: dict, extra: list | None = None) -> None:
    raw = json.dumps(body, cls=NinjaJSONEncoder).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(raw)).encode()),
        (b"cache-control", b"no-store"),
        *(extra or []),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="agentops"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": raw})


async def _database_down(send) -> None:
    # As agentops/middleware.database_unavailable answers the API.
    body = {"detail": DATABASE_DOWN_MESSAGE}
    await _respond(send, 503, body, [(b"retry-after", str(DATABASE_RETRY_AFTER_SECONDS).encode())])


async def _refused(scope: dict, send) -> bool:
    """What Django's middleware would refuse before any view: a host not allowed, plain HTTP
    when HTTPS is required. True when it answered."""
    headers = _headers(scope)
    host = headers.get("host", "")
    domain, _ = split_domain_port(host)
    allowed = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    if not domain or not validate_host(domain, allowed):
        await _respond(send, 400, {"detail": "host not allowed"})
        return True
    if settings.SECURE_SSL_REDIRECT and scope.get("scheme") != "https":
        query = scope.get("query_string", b"").decode("latin-1")
        location = f"https://{host}{scope['path']}" + (f"?{query}" if query else "")
        await send(
            {
                "type": "http.response.start",
                "status": 301,
                "headers": [(b"location", location.encode()), (b"content-length", b"0")],
            }
        )
        await send({"type": "http.response.body", "body": b""})
        return True
    return False


def _token(scope: dict) -> str:
    value = _headers(scope).get("authorization", "")
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


async def _until_disconnected(receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def _unless_disconnected(receive, work: Awaitable):
    """(True, work's result), or (False, None) when the client went away first (the work
    is cancelled: it stops listening on the way out)."""
    gone = asyncio.ensure_future(_until_disconnected(receive))
    task = asyncio.ensure_future(work)
    try:
        await asyncio.wait({gone, task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    return (True, task.result()) if task.done() and not task.cancelled() else (False, None)


async def long_poll(scope: dict, receive, send) -> None:
    """GET /api/external/calls/{call}?wait=…: see the module's docstring."""
    if await _refused(scope, send):
        return
    call_id = CALL_PATH.match(scope["path"]).group("id")
    try:
        wait = float(_query(scope).get("wait", "0"))
    except ValueError:
        wait = -1.0
    if not 0 <= wait <= MAX_WAIT_SECONDS:
        await _respond(
            send, 422, {"detail": f"wait must be between 0 and {MAX_WAIT_SECONDS} seconds"}
        )
        return
    try:
        UUID(call_id)
    except ValueError:
        await _respond(send, 404, {"detail": "no such call"})
        return
    try:
        answered, result = await _unless_disconnected(
            receive, call_state(_token(scope), call_id, wait)
        )
    except DatabaseError as exc:
        log.error("database unavailable for a gateway wait: %s", exc)
        await _respond(
            send,
            503,
            {"detail": "the database is unavailable; retry in a few seconds"},
            [(b"retry-after", b"5")],
        )
        return
    if answered:
        await _respond(send, *result)


async def session_events(scope: dict, receive, send) -> None:
    """GET /api/external/sessions/{session}/events: see the module's docstring."""
    if await _refused(scope, send):
        return
    session_id = EVENTS_PATH.match(scope["path"]).group("id")
    last = _headers(scope).get("last-event-id") or _query(scope).get("after") or "0"
    try:
        UUID(session_id)
        after = max(0, int(last))
    except ValueError:
        await _respond(send, 422, {"detail": "Last-Event-ID / after must be a step number"})
        return
    await _unless_disconnected(receive, _stream(scope, send, session_id, after))


async def _stream(scope: dict, send, session_id: str, after: int) -> None:
    token, read = _token(scope), _db(read_session_events)
    loop = asyncio.get_running_loop()
    async with Listening(session_topic(session_id)) as listening:
        try:
            status, body = await read(token, session_id, after)
        except DatabaseError:
            await _respond(
                send, 503, {"detail": "the database is unavailable"}, [(b"retry-after", b"5")]
            )
            return
        if status != 200:
            await _respond(send, status, body)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-store"),
                    (b"x-accel-buffering", b"no"),
                ],
            }
        )
        # A client's retry delay, and a first line so it sees the stream is open.
        await _chunk(send, "retry: 1000\n\n")
        next_read = loop.time() + _safety_timer()
        while True:
            for seq, state in body["events"]:
                await _chunk(send, f"id: {seq}\nevent: decision\ndata: {json.dumps(state)}\n\n")
                after = seq
            if body["closed"]:
                data = json.dumps({"session": session_id, "status": body["closed"]})
                await _chunk(send, f"event: closed\ndata: {data}\n\n")
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            while True:
                timeout = min(KEEPALIVE_SECONDS, next_read - loop.time())
                message = await listening.next_message(timeout)
                if message is not None or loop.time() >= next_read:
                    break
                await _chunk(send, ": keepalive\n\n")
            next_read = loop.time() + _safety_timer()
            try:
                status, body = await read(token, session_id, after)
            except DatabaseError as exc:
                log.warning("gateway events: database unavailable: %s", exc)
                body = {"events": [], "closed": None}
                continue  # keep the stream; the safety timer reads again
            if status != 200:  # the token was rotated, the agent deactivated
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return


async def _chunk(send, text: str) -> None:
    await send({"type": "http.response.body", "body": text.encode(), "more_body": True})
