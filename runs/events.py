"""The only code that talks to the channel layer. Events are sent after commit, once each.
Why and how: docs/design/modules.md."""

import asyncio
import copy
import logging
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Hashable

from channels.layers import get_channel_layer
from channels_redis.core import RedisChannelLayer
from django.conf import settings
from django.db import transaction

from agentkit import tracing

from . import step_metrics, step_traces
from .schemas import RunLiveOut, StepOut

log = logging.getLogger("agentops.events")

_outbox_lock = threading.Lock()
_server_loop: asyncio.AbstractEventLoop | None = None


def run_group(run_id) -> str:
    return f"run.{run_id}"


def user_group(user_id) -> str:
    """Every live socket of a user joins it: access that ends is announced there."""
    return f"user.{user_id}"


DASHBOARD_GROUP = "runs.all"
APPROVALS_GROUP = "approvals.all"


def approval_group(approval_id) -> str:
    """The sockets of the decision screens open on one approval (presence, claims)."""
    return f"approval.{approval_id}"


# The step kinds that change a run's row in the runs list and dashboard (status, model
# calls, cost); tool calls, gates and decisions do not, and would only add traffic.
SUMMARY_KINDS = frozenset({"status", "llm"})
# An event's data for rendering (the serialised step and run), beside its summary fields.
DATA_KEYS = ("step", "run")

# Extra fields of a message, computed when (and only if) it is sent.
Later = Callable[[], dict]


def remember_server_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Called from a consumer: the loop that owns in-memory layer queues."""
    global _server_loop
    _server_loop = loop


class _Outbox:
    """Events from worker threads, sent in order by one task on one long-lived loop.

    Fire-and-forget sends would run concurrently and each take a Redis connection from the
    pool (a burst of 3 000 events opened 1 361 connections); one sender keeps one. While it
    is busy, a run's events that wait to be sent merge into one that carries the newest seq
    and `first`, the oldest one it stands for: consumers read the steps in between from
    the database (runs/consumers.py), so a busy worker sends less instead of falling
    behind. Bounded: while Redis is unreachable the oldest events are dropped.
    """

    MAX_QUEUED = 10_000

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.lock = threading.Lock()
        # insertion order = send order
        self.pending: dict[Hashable, tuple[str, dict, Later | None]] = {}
        self.awake = False  # the sender will look at `pending` again without a wake-up
        self.ready = asyncio.Event()
        self.dropped = 0
        threading.Thread(target=self._run, name="events-outbox", daemon=True).start()

    def put(self, group: str, message: dict, key: Hashable, later: Later | None = None) -> None:
        with self.lock:
            waiting = self.pending.get(key)
            if waiting is not None:
                message = {**message, "first": waiting[1].get("first", waiting[1]["seq"])}
            elif len(self.pending) >= self.MAX_QUEUED:
                self.pending.pop(next(iter(self.pending)))
                self.dropped += 1
                if self.dropped % 1000 == 1:
                    log.warning("channel layer unreachable: %d live events dropped", self.dropped)
            self.pending[key] = (group, message, later)
            wake, self.awake = not self.awake, True
        if wake:
            self.loop.call_soon_threadsafe(self.ready.set)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._drain())

    async def _drain(self) -> None:
        layer = get_channel_layer()
        while True:
            await self.ready.wait()
            self.ready.clear()
            while True:
                with self.lock:
                    batch = list(self.pending.values())
                    self.pending.clear()
                    self.awake = bool(batch)
                if not batch:
                    break
                try:
                    listened = await _groups_listened_to(layer, {g for g, _, _ in batch})
                except Exception as exc:
                    log.warning("channel layer unreachable: %s", exc)
                    continue
                for group, message, later in batch:
                    if group not in listened:
                        continue
                    message = _completed(message, later)
                    try:
                        await layer.group_send(group, message)
                    except Exception as exc:
                        log.warning("channel layer send failed: %s", exc)


async def _groups_listened_to(layer, groups: set[str]) -> set[str]:
    """The groups with a member, asked in one round trip per Redis host for a whole batch.

    A group_send with nobody in the group still costs two round trips (most runs have no
    one watching); this is the same membership group_send reads (a sorted set of channels
    scored by when they joined, older than group_expiry is gone), counted, not changed.
    """
    if not isinstance(layer, RedisChannelLayer):
        return groups
    joined_after = f"({int(time.time()) - layer.group_expiry}"
    by_host: dict[int, list[str]] = defaultdict(list)
    for group in groups:
        by_host[layer.consistent_hash(group)].append(group)
    listened = set()
    for index, names in by_host.items():
        pipe = layer.connection(index).pipeline(transaction=False)
        for group in names:
            pipe.zcount(layer._group_key(group), joined_after, "+inf")
        counts = await pipe.execute()
        listened.update(group for group, count in zip(names, counts, strict=True) if count)
    return listened


_outbox: _Outbox | None = None


def _get_outbox() -> _Outbox:
    global _outbox
    with _outbox_lock:
        if _outbox is None:
            _outbox = _Outbox()
        return _outbox


def send(
    group: str, message: dict, *, merge_key: Hashable | None = None, later: Later | None = None
) -> None:
    """Send now (the caller is already after commit). Never raises: live views are a
    convenience, the timeline is the record.

    Events with the same merge_key (and a `seq`) may be merged while they wait (_Outbox).
    `later` gives more fields, asked for only if the message is sent to someone.
    """
    layer = get_channel_layer()
    if layer is None:
        return
    if not settings.EMBEDDED:
        _get_outbox().put(group, message, merge_key or object(), later)
        return
    loop = _server_loop
    if loop is None or loop.is_closed():
        return
    message = _completed(message, later)
    future = asyncio.run_coroutine_threadsafe(layer.group_send(group, message), loop)
    future.add_done_callback(_log_failure)


def _log_failure(future) -> None:
    if future.cancelled():  # the loop was shutting down
        return
    exc = future.exception()
    if exc:
        log.warning("channel layer send failed: %s", exc)


def _completed(message: dict, later: Later | None) -> dict:
    if later is None:
        return message
    try:
        return {**message, **later()}
    except Exception:
        # The event still goes out: without its data, the web process reads the database.
        log.exception("serialising a live event failed")
        return message


class _StepData:
    """A committed step and its run as they were at commit, serialised on first use, once
    for all the groups the step goes to."""

    def __init__(self, step):
        run = step.run
        # Loaded now, here, where the database may be used: the copy then serialises without
        # a query, in the sender's thread. Cached on the run for the steps that follow.
        run.launched_by  # noqa: B018
        self.step = step  # never changes once written
        self.run = copy.copy(run)  # the engine keeps changing its run
        self._step: dict | None = None
        self._run: dict | None = None

    def step_and_run(self) -> dict:
        if self._step is None:
            self._step = StepOut.from_orm(self.step).model_dump(mode="json")
        return {"step": self._step, **self.run_only()}

    def run_only(self) -> dict:
        if self._run is None:
            self._run = RunLiveOut.from_orm(self.run).model_dump(mode="json")
        return {"run": self._run}


def publish_step_on_commit(step) -> None:
    transaction.on_commit(lambda: _committed(step))


def _committed(step) -> None:
    # Counted here, once committed, as it is published: a step whose transaction is rolled
    # back (a replay, a lost race) is neither seen live nor counted.
    try:
        step_metrics.count_committed_step(step)
    except Exception:
        log.exception("counting step %s#%s failed", step.run_id, step.seq)
    if tracing.enabled():
        try:
            step_traces.trace_committed_step(step)
        except Exception:
            log.exception("tracing step %s#%s failed", step.run_id, step.seq)
    publish_step(step)


def on_step_appended(sender, step, **kwargs) -> None:
    """Receiver of runs.models.step_appended (connected in runs/apps.py)."""
    publish_step_on_commit(step)


def publish_step(step) -> None:
    # The summary now, the data if someone listens: the web process renders what viewers see
    # from it (runs/live.py), once per event.
    event = {"run_id": str(step.run_id), "seq": step.seq, "kind": step.kind}
    try:
        data = _StepData(step)
    except Exception:
        # Called after commit: the caller's work is done and must not fail here.
        log.exception("copying run %s for its live event failed", step.run_id)
        data = None
    send(
        run_group(step.run_id),
        {"type": "run.step", **event},
        merge_key=("step", step.run_id),
        later=data and data.step_and_run,
    )
    if step.kind in SUMMARY_KINDS:
        # The agent lets each dashboard socket drop the runs its user's teams do not see.
        send(
            DASHBOARD_GROUP,
            {"type": "run.changed", **event, "agent": step.run.agent},
            merge_key=("changed", step.run_id),
            later=data and data.run_only,
        )


def publish_draft(run_id, seq: int, text: str, *, omitted: int = 0) -> None:
    """The model's text so far for the step `seq` of a run (runs/engine/drafts.py). Not a
    step and nothing to commit: sent now, to the run's viewers only. Drafts of one step
    waiting to be sent merge into the newest (each carries the whole text so far)."""
    send(
        run_group(run_id),
        {"type": "run.draft", "run_id": str(run_id), "seq": seq, "text": text, "omitted": omitted},
        merge_key=("draft", run_id, seq),
    )


def publish_approvals_changed(approval_id) -> None:
    transaction.on_commit(lambda: publish_approval(approval_id))


def publish_approval(approval_id) -> None:
    # An approval changes several times (opened, decided): the event id tells the web
    # process's render cache one change from the next.
    send(
        APPROVALS_GROUP,
        {"type": "approvals.changed", "approval_id": str(approval_id), "event": uuid.uuid4().hex},
    )


def publish_presence_on_commit(approval_id) -> None:
    """Who has the approval open, or who is on it, changed: its screens re-read it."""
    message = {"type": "presence.changed"}
    transaction.on_commit(lambda: send(approval_group(approval_id), message))


def publish_access_changed(user_id, *, session: str | None = None) -> None:
    """Tell a user's sockets, once committed, that their access may have ended (runs/access.py):
    each re-checks it and closes if it may no longer see. `session` (a digest) names a
    session that ended: its sockets close without asking."""
    message = {"type": "access.changed", **({"session": session} if session else {})}
    transaction.on_commit(lambda: send(user_group(user_id), message))
