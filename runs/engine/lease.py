"""Leases: which worker runs a run, until when, and what happens when it stops holding it.

A worker claims a queued run (or one whose holder's lease expired) with a compare-and-set,
confirms and renews its lease at step boundaries, and gives it up in one of four ways: it
hands the run back to the queue at the end of a time slice, parks it in `waiting` for people,
re-queues it after an unexpected error (capped retries), or dies, and then the sweep hands
the run to another worker once the lease has expired. It may not call the model or tools.
"""

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any, NamedTuple
from uuid import UUID

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from agentkit import metrics

from .. import queue, sql
from ..models import Run, Step, queued_resend_seconds
from . import gates, owned, retry, terminator
from .owned import LEASE_MARGIN, Stop, Work, cfg, lease_seconds, renewal

log = logging.getLogger("agentops.engine")


def new_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}:{uuid.uuid4().hex[:6]}"


class Claimed(NamedTuple):
    run: Run
    beside: tuple  # owned.beside_run()'s conditions, read with the run
    read_at: float  # when (monotonic) the run was read


def claim(run_id: UUID | str, worker: str) -> Claimed | None:
    """Take the run's lease if it is queued, or running under an expired lease."""
    # A plain read, then a compare-and-set on what was read (status, version, lease holder
    # and expiry, timeline head): one statement with the started/resumed step, instead of a
    # transaction around a locked read. Another worker's claim, a cancel, a step or a lease
    # renewal in between changes one of those, and the set matches nothing.
    for _ in range(3):
        # With the run: what steering and the budget check need (owned.beside_run), so a
        # claim reads them in the statement it makes anyway.
        found = sql.get_with(Run, run_id, owned.beside_run())
        read_at = time.monotonic()
        run, beside = found or (None, ())
        if run is None or run.trigger == Run.Trigger.EXTERNAL:
            # An external session's agent runs elsewhere: no worker may take it over.
            return None
        now = timezone.now()
        takeover = run.status == Run.Status.RUNNING and (
            run.lease_expires_at is None or run.lease_expires_at < now
        )
        if run.status != Run.Status.QUEUED and not takeover:
            return None
        if _claimed(run, worker, now, takeover):
            return Claimed(run, beside, read_at)
    return None


def _claimed(run: Run, worker: str, now: datetime, takeover: bool) -> bool:
    seen = {
        "id": run.pk,
        "status": run.status,
        "version": run.version,
        "lease_owner": run.lease_owner,
        # A live holder renewing its lease changes only this: its run is not up for takeover.
        "lease_expires_at": run.lease_expires_at,
        "last_seq": run.last_seq,
    }
    claimed = {
        "status": Run.Status.RUNNING,
        "lease_owner": worker,
        "started_at": run.started_at or now,
        "version": run.version + 1,
        "resent_at": None,  # claimed: its next expiry is a new loss for the sweep
        # Long enough for a model call, usually the first thing a claimed run does.
        **renewal(model_call_next=True),
    }
    # Re-claims after an ordinary time slice leave no step (they would only be noise); the
    # first start and a takeover from a dead worker are part of the record.
    if run.started_at is None:
        event = {"event": "started", "from": Run.Status.QUEUED, "to": Run.Status.RUNNING}
    elif takeover:
        event = {
            "event": "resumed",
            "from": Run.Status.RUNNING,
            "to": Run.Status.RUNNING,
            "detail": f"lease of {run.lease_owner or 'a worker'} expired; resumed",
        }
    else:
        if not sql.update(Run, claimed, seen):
            return False
        for name, value in claimed.items():
            setattr(run, name, value)
        return True
    step = run.append_step_if_expected(Step.Kind.STATUS, event, expect=seen, update=claimed)
    return step is not None


def still_mine(
    work: Work, *, lease_for: float | None = None, must_read: bool = False, deadline: bool = True
) -> None:
    """At a step boundary: Stop if the run was cancelled or taken over; make sure the lease
    covers the call about to be made (so a slow but live call is not taken over); stop at
    max_seconds (with `deadline`).

    Usually nothing, or one plain SELECT: the step just recorded renewed the lease and
    confirmed ownership (RECHECK_AFTER_SECONDS), and a write here would cost a commit (a WAL
    flush on Postgres) on every step.
    """
    now = timezone.now()
    # A call that runs to its timeout still needs time to record its result under the lease.
    seconds = max(lease_seconds(), (lease_for or 0) * LEASE_MARGIN)
    lease_needed = now + timedelta(seconds=seconds * 0.9)
    fresh = (
        not must_read
        and time.monotonic() - work.confirmed_at < owned.RECHECK_AFTER_SECONDS
        and work.lease_until is not None
        and work.lease_until >= lease_needed
    )
    if not fresh:
        _confirm_ownership(work, now, seconds, lease_needed)
    if deadline:
        terminator.check_deadline(work)


def _confirm_ownership(work: Work, now: datetime, seconds: float, lease_needed: datetime) -> None:
    rows = sql.select(Run, ("status", "lease_owner", "lease_expires_at"), {"id": work.run.pk})
    row = rows[0] if rows else None
    if row is None or row[:2] != (Run.Status.RUNNING, work.worker):
        raise Stop
    lease_until = row[2]
    if lease_until is None or lease_until < lease_needed:
        lease_until = now + timedelta(seconds=seconds)
        renewed = Run.objects.filter(
            pk=work.run.pk, status=Run.Status.RUNNING, lease_owner=work.worker
        ).update(lease_expires_at=lease_until, updated_at=now)
        if not renewed:
            raise Stop
    work.confirmed_at = time.monotonic()
    work.lease_until = lease_until


def park_for_humans(work: Work) -> None:
    """Park the run in `waiting` and give up its lease (Stop), unless every decision is
    already in.

    The approvals were committed before this transaction; a quick decider may have decided
    them since, while the run was still `running` (so the decision could not resume it).
    The decision service holds the run's row lock, so under that lock the count is exact:
    with nothing pending we return and the caller carries on instead.
    """
    with transaction.atomic():
        run = owned.locked(work)
        waiting = gates.current().pending_count(run)
        if not waiting:
            # Decided between the gate and this pause: the decision found the run still
            # running and could not re-enqueue it, so pausing now would strand it.
            return
        run.park(
            f"waiting for {waiting} decision(s)",
            reason="waiting for a human",
            note=f"{waiting} pending decision(s)",
        )
        work.run = run
    raise Stop


def yield_slice(work: Work) -> str:
    """Hand the run back to the queue so other runs get a turn."""
    with transaction.atomic():
        updated = Run.objects.filter(
            pk=work.run.pk, status=Run.Status.RUNNING, lease_owner=work.worker
        ).update(
            status=Run.Status.QUEUED,
            lease_owner="",
            lease_expires_at=None,
            version=F("version") + 1,
            updated_at=timezone.now(),
        )
        if updated:
            transaction.on_commit(lambda: queue.enqueue(work.run.pk, agent=work.run.agent))
    return "requeued" if updated else "busy"


def on_crash(run_id: UUID | str, worker: str, exc: Exception) -> str:
    """An unexpected error: record it, then retry later (capped), or fail the run."""
    try:
        with transaction.atomic():
            run = Run.locked(run_id)
            if run.lease_owner != worker or run.status != Run.Status.RUNNING:
                return run.status
            detail = f"{type(exc).__name__}: {exc}"
            run.append_step(
                Step.Kind.STATUS,
                {
                    "event": "error",
                    "from": Run.Status.RUNNING,
                    "to": Run.Status.RUNNING,
                    "detail": detail[:2000],
                },
            )
            if run.retry_count + 1 >= cfg("RUN_MAX_RETRIES"):
                _fail_after_engine_errors(run, exc)
                return Run.Status.FAILED
            Run.objects.filter(pk=run.pk).update(retry_count=F("retry_count") + 1)
            run.transition_to(Run.Status.QUEUED, lease_owner="", lease_expires_at=None)
            delay = retry.backoff(run.retry_count + 1)
            transaction.on_commit(lambda: queue.enqueue(run_id, agent=run.agent, countdown=delay))
            return "requeued"
    except Exception:
        log.exception("run %s: could not record the error", run_id)
        return "error"


def _fail_after_engine_errors(run: Run, exc: Exception) -> None:
    run.terminate(Run.Status.FAILED, Run.Termination.CONSECUTIVE_ERRORS, f"engine error: {exc}")


SWEEP_BATCH = 500


def sweep(now: datetime | None = None) -> int:
    """Re-enqueue runs whose worker died (lease expired) or whose queue message was lost, in
    batches of SWEEP_BATCH until none is left: a fleet restart with 100 000 runs in flight is
    resumed by one sweep, not 500 runs a sweep.

    A run already re-sent waits in the queue like any other: it is not sent again on the
    next sweep because it is old. Sent again are those whose message is known not to be in
    the broker: expired leases not yet re-sent, runs whose enqueue failed (`unsent`), every
    one when the broker lost its messages (runs/queue.py's marker), and, with the run
    queues empty (nothing waits in them, so no message can), queued runs not sent for
    `queued_resend_seconds()`.
    """
    now = now or timezone.now()
    expired = Q(status=Run.Status.RUNNING, lease_expires_at__lt=now)
    queued = Q(status=Run.Status.QUEUED)
    lost = (expired & Q(resent_at__isnull=True)) | (queued & Q(unsent=True))
    try:
        if queue.broker_lost_messages():
            lost = expired | queued
        elif not queue.depth():
            stale = now - timedelta(seconds=queued_resend_seconds())
            not_lately = Q(resent_at__isnull=True) | Q(resent_at__lt=stale)
            lost |= (expired | (queued & Q(updated_at__lt=stale))) & not_lately
    except Exception as exc:  # the broker is down: whatever is sent now fails and is marked
        log.warning("sweep: broker unreachable (%s); re-sending what is known lost", exc)
    resent = takeovers = 0
    for batch in _batches(Run.objects.filter(lost), now):
        for run_id, agent, status in batch:
            queue.enqueue(run_id, agent=agent)
            takeovers += status == Run.Status.RUNNING
        resent += len(batch)
    metrics.sweeps.inc()
    metrics.lease_expiries.inc(takeovers)
    metrics.sweep_resent.inc(resent - takeovers)
    return resent


def _batches(runs: Any, now: datetime) -> Iterator[list[tuple]]:
    """`runs` in batches, each marked sent (resent_at, unsent) before it is enqueued; keyed
    on the primary key, so a batch costs the same at the millionth run as at the first."""
    after = None
    while True:
        page = runs.order_by("pk") if after is None else runs.filter(pk__gt=after).order_by("pk")
        batch = list(page.values_list("pk", "agent", "status")[:SWEEP_BATCH])
        if not batch:
            return
        Run.objects.filter(pk__in=[row[0] for row in batch]).update(resent_at=now, unsent=False)
        yield batch
        if len(batch) < SWEEP_BATCH:
            return
        after = batch[-1][0]
