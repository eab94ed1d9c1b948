"""Pending operations finished from outside the engine (runs/engine/awaiting.py opens them).

A callback to the call's signed URL, an operator, a poll or the deadline finishes one
(`finish`): under the run's row lock, the operation's outcome is recorded; when the run is
not running, its `pending` step is written too, and a run that waits is resumed in the same
write (unless people still have decisions to make: their decision resumes it). A running run's
worker reports it itself before its next model call. A finished operation stays finished:
the same outcome again is a no-op, another one a conflict.
"""

import contextlib
import logging
from datetime import timedelta

from django.core import signing
from django.db import transaction
from django.utils import timezone

from agentkit.tools import CALLBACK_SALT, Pending, ToolContext, ToolError, breaker, get_tool

from ..engine import gates
from ..engine.awaiting import report_data
from ..models import PendingOperation, Run, Step

log = logging.getLogger("agentops.pending")

Status = PendingOperation.Status


class AlreadyFinished(Exception):
    def __init__(self, op: PendingOperation):
        when = f"{op.finished_at:%Y-%m-%d %H:%M} UTC" if op.finished_at else "earlier"
        super().__init__(f"operation #{op.pk} already {op.status.replace('_', ' ')} ({when})")
        self.op = op


def operation_for_token(token: str) -> PendingOperation | None:
    """The operation a callback URL's token names; None for a forged or unknown token."""
    try:
        key = signing.Signer(salt=CALLBACK_SALT).unsign(token)
    except signing.BadSignature:
        return None
    return PendingOperation.objects.filter(key=key).first()


def finish(op_id: int, status: str, *, result=None, error: str = "", by: str) -> PendingOperation:
    """Record how an operation ended (COMPLETED with `result`, FAILED or TIMED_OUT with
    `error`), and tell its run. AlreadyFinished when it had ended otherwise."""
    outcome = result if status == Status.COMPLETED else {"error": error or status}
    with transaction.atomic():
        run_id = PendingOperation.objects.values_list("run_id", flat=True).get(pk=op_id)
        run = Run.locked(run_id)  # the order every writer takes: the run, then its rows
        op = PendingOperation.objects.select_for_update().get(pk=op_id)
        if not op.is_open:
            if op.status == status and op.result == outcome:
                return op  # a repeated callback: the first one stands
            raise AlreadyFinished(op)
        op.status, op.result, op.finished_by = status, outcome, by[:200]
        op.finished_at = timezone.now()
        if run.is_terminal:
            op.status, op.result = Status.CANCELLED, {"error": f"the run had {run.status}"}
        elif run.status != Run.Status.RUNNING:
            op.reported_seq = _tell_waiting_run(run, report_data(op))
        op.save()
    return op


def _tell_waiting_run(run: Run, data: dict) -> int:
    """Write the operation's step to a run no worker holds; resume it when nothing else
    holds it back. The step's seq."""
    detail = f"operation #{data['operation']} {data['event'].replace('_', ' ')}"
    if (
        run.status == Run.Status.WAITING
        and not gates.current().pending_count(run)
        and run.resume(detail, first=(Step.Kind.PENDING, data, {}))
    ):
        return run.last_seq - 1  # the resumed step follows it
    run.append_step(Step.Kind.PENDING, data)
    return run.last_seq


def escalate(op_id: int) -> None:
    """Its deadline passed and a person decides what happens now (on_timeout="person"):
    shown on the run page and in its timeline; the run goes on waiting."""
    with transaction.atomic():
        run_id = PendingOperation.objects.values_list("run_id", flat=True).get(pk=op_id)
        run = Run.locked(run_id)
        op = PendingOperation.objects.select_for_update().get(pk=op_id)
        if op.status != Status.OPEN:
            return
        op.status = Status.ESCALATED
        op.save(update_fields=["status"])
        run.append_step(
            Step.Kind.PENDING,
            {
                "event": "escalated",
                "operation": op.pk,
                "tool": op.tool,
                "awaits": op.awaits,
                "detail": f"no completion by {op.deadline:%Y-%m-%d %H:%M} UTC; an operator decides",
            },
        )


def sweep(now=None) -> int:
    """Deadlines passed, polls due, operations of runs that ended: how many it settled.
    Run by beat and the embedded sweeps, like the lease sweep."""
    now = now or timezone.now()
    settled = 0
    ended = PendingOperation.objects.filter(
        status__in=(Status.OPEN, Status.ESCALATED), run__status__in=Run.TERMINAL_STATUSES
    )
    settled += ended.update(status=Status.CANCELLED, finished_at=now, finished_by="run ended")
    late_ones = PendingOperation.objects.filter(status=Status.OPEN, deadline__lte=now)
    for op in _in_batches(late_ones):
        if op.on_timeout == "person":
            escalate(op.pk)
        else:
            late = f"no completion by the deadline {op.deadline:%Y-%m-%d %H:%M} UTC"
            _finish_quietly(op, Status.TIMED_OUT, error=late, by="deadline")
        settled += 1
    due = PendingOperation.objects.filter(
        status=Status.OPEN, completion=PendingOperation.Completion.POLL, next_poll_at__lte=now
    )
    for op in _in_batches(due):
        settled += poll(op, now)
    return settled


SWEEP_BATCH = 200


def _in_batches(operations):
    """Every operation of the query, SWEEP_BATCH at a time by primary key: no cap on what one
    sweep settles, and no batch read again after its operations changed."""
    after = 0
    while True:
        batch = list(operations.filter(pk__gt=after).order_by("pk")[:SWEEP_BATCH])
        yield from batch
        if len(batch) < SWEEP_BATCH:
            return
        after = batch[-1].pk


def poll(op: PendingOperation, now) -> int:
    """Ask the operation's poll tool how it is going: 1 when that finished it."""
    tool = get_tool(op.poll_tool)
    if tool is None or tool.has_side_effects:
        _finish_quietly(op, Status.FAILED, error=f"poll tool {op.poll_tool!r} unusable", by="poll")
        return 1
    if not breaker.allow(tool.name):
        return _poll_later(op, now)
    ctx = ToolContext(run_id=str(op.run_id), idempotency_key=op.key, deadline=0.0)
    try:
        answer = tool.call(tool.validate(op.poll_args or {}), ctx)
    except ToolError as exc:
        breaker.record(tool.name, ok=True)
        _finish_quietly(op, Status.FAILED, error=str(exc), by=f"poll {tool.name}")
        return 1
    except Exception:
        log.exception("poll of operation #%s with %s failed", op.pk, tool.name)
        breaker.record(tool.name, ok=False)
        return _poll_later(op, now)
    breaker.record(tool.name, ok=True)
    if isinstance(answer, Pending):
        return _poll_later(op, now)
    _finish_quietly(op, Status.COMPLETED, result=answer, by=f"poll {tool.name}")
    return 1


def _poll_later(op: PendingOperation, now) -> int:
    every = timedelta(seconds=op.poll_every_seconds or 60)
    PendingOperation.objects.filter(pk=op.pk).update(next_poll_at=now + every)
    return 0


def _finish_quietly(op: PendingOperation, status: str, **outcome) -> None:
    with contextlib.suppress(AlreadyFinished):  # finished another way meanwhile
        finish(op.pk, status, **outcome)


def cancel_with_run(sender, run: Run, **kwargs) -> int:
    """A cancelled run awaits nothing (runs.models.run_cancelled, inside the cancel's
    transaction)."""
    return PendingOperation.objects.filter(
        run=run, status__in=(Status.OPEN, Status.ESCALATED)
    ).update(status=Status.CANCELLED, finished_at=timezone.now(), finished_by="run cancelled")
