"""Waking whoever waits on an external call: a message on the channel layer when its
decision is committed (gateway/waits.py explains the waiting side).
Why and how: docs/design/modules.md."""

import logging
import threading
from uuid import UUID

import redis
from django.conf import settings
from django.db import transaction
from django.db.models import Q

from agentkit import redis_target
from approvals.models import Approval
from runs import events
from runs.models import Run, Step

from .models import ExternalAgent, ExternalCall

DECIDED = "gateway.decided"
DECISIONS_GROUP = "gateway.decisions"
# What names each web process's listening channel (after its "!"), whose capacity the
# settings raise (CHANNEL_LAYERS' channel_capacity): a burst of decisions must not overflow it.
HUB_CHANNEL_MARK = "gateway-hub-"


async def new_hub_channel(layer) -> str:
    """A process-local channel like the live pages' (`specific.<process>!…`), marked.

    channels_redis reads all of a process's "!" channels through one lock, and its holder
    pops only the messages of its own prefix: a hub channel with a prefix of its own held
    that lock up to 5 s at a time (its blocking pop's timeout) while every live page's
    message waited in the other key: pushes came seconds late, or not within a test's
    15 s, once an external agent had waited on the process."""
    name = await layer.new_channel()
    return name.replace("!", "!" + HUB_CHANNEL_MARK, 1)


log = logging.getLogger("agentops.gateway")


class _Numbering:
    """Messages to DECISIONS_GROUP are numbered 1, 2, 3… across the installation (a Redis
    counter; this process's own when embedded, where it is the only one). A listening process
    notes the counter when it joins: a later number that never reaches it (a message dropped
    by a full channel, by the outbox while Redis was away, or expired) was lost, and its
    waiters read again, instead of learning the decision minutes late (gateway/waits.py)."""

    KEY = "agentops:gateway:decision-number"
    TIMEOUT_SECONDS = 1.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._issued = 0  # embedded
        self._client: redis.Redis | None = None

    def stamp(self, message: dict) -> dict:
        number = self._next()
        return message if number is None else {**message, "n": number}

    def current(self) -> int | None:
        """The last number issued, or None if the counter cannot be read."""
        if not settings.REDIS_URL:
            return self._issued
        try:
            return int(self._redis().get(self.KEY) or 0)
        except redis.RedisError as error:
            log.warning("gateway: the decisions counter is unreadable: %s", error)
            return None

    def _next(self) -> int | None:
        if not settings.REDIS_URL:
            with self._lock:
                self._issued += 1
                return self._issued
        try:
            return int(self._redis().incr(self.KEY))
        except redis.RedisError as error:  # the message goes unnumbered: nothing waits on it
            log.warning("gateway: the decisions counter is unreachable: %s", error)
            return None

    def _redis(self) -> redis.Redis:
        if self._client is None:
            self._client = redis_target.client(
                settings.REDIS_URL,
                socket_timeout=self.TIMEOUT_SECONDS,
                socket_connect_timeout=self.TIMEOUT_SECONDS,
            )
        return self._client


numbering = _Numbering()


def call_topic(call_id) -> str:
    """What the waiters of one call listen to in their process (gateway/waits.py)."""
    return f"call.{UUID(str(call_id)).hex}"


def session_topic(run_id) -> str:
    return f"session.{UUID(str(run_id)).hex}"


# --- pushing -----------------------------------------------------------------------------
def on_step_appended(sender, step: Step, **kwargs) -> None:
    """runs.models.step_appended: a final decision on an external call wakes its waiters,
    once committed; so does a session resumed after an expiry halted it. Other steps cost
    nothing here (no query)."""
    if step.kind not in (Step.Kind.DECISION, Step.Kind.STATUS):
        return
    if step.run.trigger != Run.Trigger.EXTERNAL:
        return
    if step.kind == Step.Kind.STATUS:
        if step.data.get("event") != "resumed":
            return
        # The calls whose expiry halted the session are told now that it expired.
        halted = Approval.objects.filter(
            run_id=step.run_id, status=Approval.Status.EXPIRED, on_expiry="halt"
        ).values_list("pk", flat=True)
        publish_cancelled_on_commit(halted, step.run_id)
        return
    if step.data.get("status") in (None, "pending") or not step.data.get("approval"):
        return  # one vote of a quorum: nothing decided yet
    call_id = (
        ExternalCall.objects.filter(approval_id=step.data["approval"])
        .values_list("pk", flat=True)
        .first()
    )
    if call_id is not None:
        publish_decided_on_commit(call_id, step.run_id)


def publish_decided_on_commit(call_id, run_id) -> None:
    transaction.on_commit(lambda: publish_decided(call_id, run_id))


def publish_decided(call_id, run_id) -> None:
    """Wake whoever waits on this call or its session (after commit; never raises)."""
    topics = [call_topic(call_id), session_topic(run_id)]
    message = {"type": DECIDED, "topics": topics, "call": str(call_id)}
    events.send(DECISIONS_GROUP, numbering.stamp(message))


def publish_cancelled_on_commit(approval_ids, run_id) -> None:
    """The calls of these approvals changed with their session (cancelled, or resumed after
    a halt): their waiters read again (one query)."""
    calls = ExternalCall.objects.filter(approval_id__in=list(approval_ids)).values_list(
        "pk", flat=True
    )
    for call_id in calls:
        publish_decided_on_commit(call_id, run_id)


def publish_session_ended_on_commit(run_id) -> None:
    """The session ended: its event streams say so and end."""
    message = {"type": DECIDED, "topics": [session_topic(run_id)], "call": None}
    transaction.on_commit(lambda: events.send(DECISIONS_GROUP, numbering.stamp(message)))


def on_run_cancelled(sender, run: Run, **kwargs) -> None:
    """runs.models.run_cancelled: an operator cancelled an external session; its waiting
    calls (their approvals cancelled with it) and event streams learn it at once."""
    if run.trigger != Run.Trigger.EXTERNAL:
        return
    approvals = Approval.objects.filter(
        Q(status__in=[Approval.Status.PENDING, Approval.Status.CANCELLED])
        | Q(status=Approval.Status.EXPIRED, on_expiry="halt"),  # a halted call waits too
        run=run,
    ).values_list("pk", flat=True)
    publish_cancelled_on_commit(approvals, run.pk)
    publish_session_ended_on_commit(run.pk)


def on_agent_saved(sender, instance: ExternalAgent, created: bool = False, **kwargs) -> None:
    """An agent switched off (or its token rotated): its waiting requests are woken, re-read
    with their token and answer 401 now, not when their wait ends. One query for the calls
    of its sessions still open; an agent saved while active wakes them to find nothing new."""
    if created:
        return
    calls = ExternalCall.objects.filter(
        run__agent=instance.slug,
        run__trigger=Run.Trigger.EXTERNAL,
        run__status__in=Run.ACTIVE_STATUSES,
    ).values_list("pk", "run_id")
    for call_id, run_id in calls:
        publish_decided_on_commit(call_id, run_id)
