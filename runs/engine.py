"""The durable agent loop.

advance(run_id) claims a run (a compare-and-set lease, so two workers never execute one run),
loads its state, and repeats: terminator pre-check -> one executor step (one model call, then
the tool calls it asked for) -> each step, the run's counters and the checkpoint written
together (one statement on Postgres, runs/sql.py; a transaction where approvals open or the
ledger records an outcome) -> events published after commit. Calls without side effects run
as soon as the model asks for them and are written with its step: one write per iteration.
It keeps going for a short time slice, then re-enqueues the run if other runs wait for a
worker thread (otherwise it keeps going).

Side effects go through the ledger (SideEffect): intent committed before the call, outcome
committed with the step after it. On resume a committed effect is never repeated; an intent
without outcome is retried with the same key when the tool honours keys, otherwise the run
waits for an operator to say whether it happened. An infrastructure error (timeout, dropped
connection) from such a tool is the same situation and is never retried blindly either.

Deadlines are enforced here, not by Celery (its time limits do not apply on the threads
pool): a task works one time slice, a run stops at max_seconds, a model call has the
provider's timeout, a tool gets a deadline in its context; a worker that hangs or dies stops
renewing its lease, and the sweep hands the run to another worker.
"""

import hashlib
import logging
import os
import random
import signal
import socket
import threading
import time
import uuid
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone
from kombu.exceptions import OperationalError

from agentops import llm
from agentops.agents import Agent, Limits
from agentops.llm import pricing
from agentops.tools import (
    Tool,
    ToolArgsError,
    ToolContext,
    ToolError,
    ToolInfraError,
    breaker,
    get_tool,
)
from approvals.models import Approval, args_hash

from . import events, sql
from .models import (
    CHECKPOINT_COLUMNS,
    RUN_COLUMNS,
    STEP_COLUMNS,
    Checkpoint,
    Run,
    SideEffect,
    Step,
    canonical_json,
)

log = logging.getLogger("agentops.engine")

NO_PROGRESS_REPEATS = 3  # the same tool call with the same arguments, this many times
# ... among the run's last this many calls. A bounded window keeps the checkpointed state
# the same size at step 5 and at step 500; a loop longer than this is max_steps' to stop.
NO_PROGRESS_WINDOW = 30
TOOL_RESULT_MAX_CHARS = 20_000  # what the model sees; the timeline keeps the full result
ASK_OPERATOR = "ask_operator"
LEASE_MARGIN = 1.25  # a lease outlasts a call's timeout by this factor, to record its result
# Ownership confirmed by this worker's own write or read less than this long ago is not
# read again before a model call or a tool without side effects: a cancel landing in that
# window is seen when the step is recorded (the same as a cancel landing just after the
# read), and what the call returned is discarded then. Calls with side effects always read
# first.
RECHECK_AFTER_SECONDS = 1.0


def _cfg(name: str) -> Any:
    return settings.AGENTOPS[name]


def new_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}:{uuid.uuid4().hex[:6]}"


def lease_seconds() -> float:
    return float(_cfg("LEASE_SECONDS"))


# --- launch -----------------------------------------------------------------------------------
def launch(
    *,
    agent: Agent,
    input: dict,
    limits: Limits | None = None,
    trigger: str = Run.Trigger.API,
    launched_by=None,
    parent: Run | None = None,
    provider: str | None = None,
) -> Run:
    """Create a queued run from already validated input and enqueue it after commit."""
    limits = limits or agent.limits
    now = timezone.now()
    run = Run(
        agent=agent.slug,
        agent_config=agent.snapshot(),
        provider=provider or llm.default_provider_name(),
        input=input,
        trigger=trigger,
        launched_by=launched_by,
        parent=parent,
        max_steps=limits.max_steps,
        max_cost_usd=limits.max_cost_usd,
        max_seconds=limits.max_seconds,
        max_consecutive_errors=limits.max_consecutive_errors,
        created_at=now,
        updated_at=now,
    )
    step = run.first_step(
        {
            "event": "launched",
            "from": None,
            "to": Run.Status.QUEUED,
            "trigger": trigger,
            "by": launched_by.get_username() if launched_by else None,
            "input": input,
            "prompt": agent.prompt(input),
            "limits": limits.as_dict(),
            "provider": run.provider,
        }
    )
    checkpoint = Checkpoint(run=run, seq=step.seq, state=_initial_state(), created_at=now)
    # Run, launched step and first checkpoint in one statement (runs/sql.py): a launch of many
    # runs at once (a batch, the benchmark) is mostly these round trips.
    sql.insert_all(
        [
            (run, RUN_COLUMNS, (), ()),
            (step, STEP_COLUMNS, (), ()),
            (checkpoint, CHECKPOINT_COLUMNS, (), ()),
        ]
    )
    events.publish_step_on_commit(step)
    transaction.on_commit(lambda: enqueue(run.pk))
    return run


def enqueue(run_id, *, countdown: float | None = None) -> bool:
    """Send the run to a worker; False when the broker is unreachable.

    Called after the run's state is committed (launch, a decision, a yielded slice), so a
    broker outage must not turn a done deed into an error for the caller (a 500 on a launch
    or a decision that did happen): the run stays queued and the sweep re-sends it.
    """
    from .tasks import advance_run

    try:
        advance_run.apply_async(args=[str(run_id)], countdown=countdown)
    except OperationalError as exc:
        log.warning("run %s: not sent to a worker (%s); the sweep will re-send it", run_id, exc)
        return False
    return True


def _initial_state() -> dict:
    return {"pending": [], "recent_calls": []}


# --- the loop -----------------------------------------------------------------------------------
class Stop(Exception):
    """This worker must stop working on the run (it finished, waits, or lost its lease)."""


class StepAgain(Exception):
    """End this step early; the next one starts from the checkpointed state afresh."""


@dataclass
class Work:
    """What one worker holds in memory while it owns a run's lease."""

    run: Run
    agent_config: dict
    state: dict
    messages: list[dict]
    worker: str
    provider: Any
    # Seconds the run spent waiting for people, left out of its max_seconds (read once per
    # claim: a run that waits again is parked, and the next claim reads it afresh).
    waited: float = 0.0
    # When this worker last saw (monotonic) that it owns the run, and the lease it wrote.
    confirmed_at: float = 0.0
    lease_until: datetime | None = None
    # The conversation's length as canonical JSON, kept up to date as it grows: the cost
    # estimate and context trimming need it before every model call, and serialising the
    # whole conversation each time made a step's cost grow with the run's length.
    messages_chars: int = 0

    def add_message(self, message: dict) -> None:
        self.messages.append(message)
        self.messages_chars += len(canonical_json(message)) + 1

    def add_tool_result(self, block: dict) -> None:
        last = self.messages[-1]
        if last["role"] == "user" and isinstance(last["content"], list):
            last["content"].append(block)
            self.messages_chars += len(canonical_json(block)) + 1
        else:
            self.add_message({"role": "user", "content": [block]})

    @property
    def active_seconds(self) -> float:
        return self.run.elapsed_seconds - self.waited


def advance(run_id, *, worker: str | None = None, time_slice: float | None = None) -> str:
    """Work on a run for up to one time slice. Returns what happened, for logs and tests:
    "busy" (someone else has it or it is not runnable), "requeued", or the run's status."""
    worker = worker or new_worker_id()
    run = claim(run_id, worker)
    if run is None:
        return "busy"
    slice_seconds = time_slice if time_slice is not None else _cfg("TIME_SLICE_SECONDS")
    slice_end = time.monotonic() + slice_seconds
    work = None
    try:
        work = _load(run, worker)
        while True:
            _step(work)
            if time.monotonic() >= slice_end:
                if runs_waiting():
                    return _yield_slice(work)
                # Nobody waits for a worker: re-queueing would only cost a claim and a
                # re-read of the timeline.
                slice_end = time.monotonic() + slice_seconds
    except Stop:
        # Our own last write says where it stopped, unless the run was taken from us.
        if work is not None and work.run.status != Run.Status.RUNNING:
            return work.run.status
        return Run.objects.filter(pk=run_id).values_list("status", flat=True).first() or "gone"
    except Exception as exc:
        log.exception("run %s: unexpected error", run_id)
        return _on_crash(run_id, worker, exc)


def claim(run_id, worker: str) -> Run | None:
    """Take the run's lease if it is queued, or running under an expired lease."""
    # A plain read, then a compare-and-set on what was read (status, version, lease holder
    # and expiry, timeline head): one statement with the started/resumed step, instead of a
    # transaction around a locked read. Another worker's claim, a cancel, a step or a lease
    # renewal in between changes one of those, and the set matches nothing.
    for _ in range(3):
        run = sql.get(Run, run_id)
        if run is None:
            return None
        now = timezone.now()
        takeover = run.status == Run.Status.RUNNING and (
            run.lease_expires_at is None or run.lease_expires_at < now
        )
        if run.status != Run.Status.QUEUED and not takeover:
            return None
        if _claimed(run, worker, now, takeover):
            return run
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
        # Long enough for a model call, usually the first thing a claimed run does.
        **_renewal(model_call_next=True),
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


# The steps the model's conversation is rebuilt from.
CONVERSATION_KINDS = [Step.Kind.LLM, Step.Kind.TOOL, Step.Kind.STATUS]


def _load(run: Run, worker: str) -> Work:
    latest = sql.select(Checkpoint, ("state",), {"run": run.pk}, order_by=("-seq",), limit=1)
    state = latest[0][0] if latest else _initial_state()
    # One read of the timeline for both the conversation and the time spent waiting.
    rows = sql.select(
        Step,
        ("kind", "data", "created_at"),
        {"run": run.pk, "kind": tuple(CONVERSATION_KINDS)},
        order_by=("seq",),
    )
    messages = _messages(rows)
    status_steps = [(data, at) for kind, data, at in rows if kind == Step.Kind.STATUS]
    return Work(
        run=run,
        agent_config=run.agent_config,
        state=state,
        messages=messages,
        messages_chars=len(canonical_json(messages)),
        worker=worker,
        provider=llm.provider_for_run(run),
        waited=run.seconds_waiting_for_humans(status_steps),
        confirmed_at=time.monotonic(),
        lease_until=run.lease_expires_at,
    )


def conversation(run: Run, *, upto_seq: int | None = None) -> list[dict]:
    """The Messages API conversation, rebuilt from the timeline (the single record)."""
    steps = run.steps.filter(kind__in=CONVERSATION_KINDS)
    if upto_seq is not None:
        steps = steps.filter(seq__lte=upto_seq)
    return _messages(steps.order_by("seq").values_list("kind", "data", "created_at"))


def _messages(rows) -> list[dict]:
    """Messages from (kind, data, created_at) timeline rows in seq order."""
    messages: list[dict] = []
    results: list[dict] = []
    for kind, data, _ in rows:
        if kind == Step.Kind.STATUS:
            if data.get("event") == "launched":
                messages.append({"role": "user", "content": data["prompt"]})
        elif kind == Step.Kind.LLM:
            if results:
                messages.append({"role": "user", "content": results})
                results = []
            messages.append({"role": "assistant", "content": data["content"]})
        elif kind == Step.Kind.TOOL:
            results.append(_tool_result_block(data))
    if results:
        messages.append({"role": "user", "content": results})
    return messages


def _tool_result_block(data: dict) -> dict:
    content = data.get("error") if data.get("is_error") else data.get("result")
    text = content if isinstance(content, str) else canonical_json(content)
    if len(text) > TOOL_RESULT_MAX_CHARS:
        text = (
            text[:TOOL_RESULT_MAX_CHARS]
            + f"\n[truncated {len(text) - TOOL_RESULT_MAX_CHARS} chars]"
        )
    block = {"type": "tool_result", "tool_use_id": data["tool_use_id"], "content": text}
    if data.get("is_error"):
        block["is_error"] = True
    return block


def _step(work: Work) -> None:
    """One unit of progress: run pending tool calls, or make the next model call."""
    try:
        if work.state["pending"]:
            _run_pending_tools(work)
        else:
            _terminator_precheck(work)
            _continue_checkpoint(work)
            _model_call(work)
    except StepAgain:
        pass


# --- terminator ----------------------------------------------------------------------------------
def _terminator_precheck(work: Work) -> None:
    run = work.run
    # An operator may have cancelled the run since our last write: stop before paying for
    # another model call (and hold the lease for as long as that call may take).
    _still_mine(work, lease_for=_cfg("LLM_TIMEOUT_SECONDS"))
    if run.step_count >= run.max_steps:
        _terminate(
            work, Run.Termination.MAX_STEPS, f"{run.step_count} of {run.max_steps} steps used"
        )
    if run.consecutive_errors >= run.max_consecutive_errors:
        _terminate(
            work,
            Run.Termination.CONSECUTIVE_ERRORS,
            f"{run.consecutive_errors} consecutive errors (limit {run.max_consecutive_errors})",
        )
    estimate = _estimate_next_cost(work)
    if run.cost_usd + estimate > run.max_cost_usd:
        _terminate(
            work,
            Run.Termination.MAX_COST,
            f"spent {run.cost_usd:.4f} USD; the next call could cost up to {estimate:.4f} "
            f"and the limit is {run.max_cost_usd} USD",
        )


def _request_chars(work: Work) -> int:
    """System prompt, tool schemas and the whole conversation, as canonical JSON (which
    escapes non-ASCII text, so characters here are bytes)."""
    tools = [_anthropic_tool(t) for t in work.agent_config["tools"]]
    return len(canonical_json([work.agent_config["system_prompt"], tools])) + work.messages_chars


# Anthropic adds a tool-use system prompt of a few hundred tokens when tools are given.
TOOL_USE_OVERHEAD_TOKENS = 500


def _estimate_next_cost(work: Work) -> Decimal:
    """An upper bound for the next call: the whole untrimmed conversation, the tool schemas,
    and max_tokens of output. Bytes, not characters, so non-Latin text is not underestimated.
    Scripted runs are priced by the same table, so cost limits behave the same in demos."""
    tokens = _request_chars(work) // 3 + 1 + TOOL_USE_OVERHEAD_TOKENS
    return pricing.estimate_max_cost(
        work.agent_config["model"], tokens, work.agent_config.get("max_tokens", 1024)
    )


def _terminate(work: Work, reason: str, detail: str = "", *, output: str = "") -> None:
    # running -> succeeded/failed (Run.TRANSITIONS), set by the same compare-and-set that
    # appends the step: only while the run is still running under our lease.
    step, update = _termination(work, reason, detail, output=output)
    _append_owned(work, Step.Kind.STATUS, step, update)
    raise Stop


def _termination(
    work: Work, reason: str, detail: str = "", *, output: str = ""
) -> tuple[dict, dict]:
    """The terminated step's data and the run's fields for it."""
    status = Run.Status.SUCCEEDED if reason == Run.Termination.COMPLETED else Run.Status.FAILED
    now = timezone.now()
    step = {
        "event": "terminated",
        "from": Run.Status.RUNNING,
        "to": status,
        "reason": reason,
        "detail": detail,
    }
    update = {
        "status": status,
        "termination_reason": reason,
        "status_detail": detail[:500],
        "output": output,
        "finished_at": now,
        "lease_owner": "",
        "lease_expires_at": None,
        "updated_at": now,
        "version": work.run.version + 1,
    }
    return step, update


def _locked_owned(work: Work) -> Run:
    """The run under a row lock, if this worker still owns it and it is still running.

    An operator's cancel (or a sweep takeover) moves the run away from us; we stop then.
    """
    run = Run.locked(work.run.pk)
    if run.lease_owner != work.worker or run.status != Run.Status.RUNNING:
        work.run = run
        raise Stop
    return run


def _append_owned(
    work: Work,
    kind: str,
    data: dict,
    update: dict,
    *,
    checkpoint: bool = False,
    then: tuple[tuple[str, dict, dict], ...] = (),
    **columns: Any,
) -> Step:
    """Append a step to the run this worker holds, writing the run's new counters and a
    renewed lease in the same UPDATE (one compare-and-set, no locked read first), the
    `then` steps after it, and with `checkpoint` the engine state as it is now, at the last
    of them. Stop if the run is no longer ours.

    Outside `atomic` on Postgres this is one statement: one round trip, its own transaction.
    """
    step = work.run.append_step_if_expected(
        kind,
        data,
        expect={"status": Run.Status.RUNNING, "lease_owner": work.worker},
        update=update,
        checkpoint=work.state if checkpoint else None,
        then=then,
        **columns,
    )
    if step is None:
        # Someone else wrote to the run: a cancel, a takeover, or a decision's step.
        with transaction.atomic():
            work.run = _locked_owned(work)
            step = work.run.append_step(kind, data, update=update, **columns)
            if kind == Step.Kind.LLM:
                # Its calls were planned as the step after the head we knew (gated or not);
                # another step came first.
                for item in work.state["pending"]:
                    item["llm_seq"] = step.seq
            for then_kind, then_data, then_columns in then:
                work.run.append_step(then_kind, then_data, **then_columns)
            if checkpoint:
                _checkpoint(work)
    work.confirmed_at = time.monotonic()
    work.lease_until = work.run.lease_expires_at
    return step


def _renewal(*, model_call_next: bool) -> dict:
    """Lease fields for a step's write: long enough for the next call to finish and be
    recorded under it (a model call may take its whole timeout)."""
    seconds = lease_seconds()
    if model_call_next:
        seconds = max(seconds, _cfg("LLM_TIMEOUT_SECONDS") * LEASE_MARGIN)
    now = timezone.now()
    return {"lease_expires_at": now + timedelta(seconds=seconds), "updated_at": now}


# --- periodic "continue?" checkpoint (rules and question in approvals/gates.py) ------------------
def _continue_checkpoint(work: Work) -> None:
    """Every N model steps (GateRules.continue_every_n_steps, 0 = off), before the next model
    call, the run waits for an operator to answer "continue?". "continue" goes on; "stop"
    (or a rejection) cancels the run; an expired question fails it as approval_expired."""
    from approvals import gates

    if not gates.continue_due(work.run):
        return
    approval = gates.continue_question(work.run)
    if approval is None:
        with transaction.atomic():
            work.run = _locked_owned(work)
            gates.open_continue_question(work.run)
        _wait_for_humans(work)  # returns only when it was answered meanwhile
        approval = gates.continue_question(work.run)
    elif approval.status == Approval.Status.PENDING:
        _wait_for_humans(work)
        approval.refresh_from_db()
    outcome, detail = gates.continue_outcome(approval)
    if outcome == gates.CONTINUE:
        return
    if outcome == gates.STOP:
        work.run.cancel(by=approval.decided_by, reason=detail)
        raise Stop
    _terminate(work, Run.Termination.APPROVAL_EXPIRED, detail)


def _still_mine(
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
        and time.monotonic() - work.confirmed_at < RECHECK_AFTER_SECONDS
        and work.lease_until is not None
        and work.lease_until >= lease_needed
    )
    if not fresh:
        _confirm_ownership(work, now, seconds, lease_needed)
    if deadline and work.active_seconds >= work.run.max_seconds:
        detail = f"{work.active_seconds:.0f}s of {work.run.max_seconds}s"
        if work.waited:
            detail += f" (not counting {work.waited:.0f}s waiting for people)"
        _terminate(work, Run.Termination.MAX_SECONDS, detail)


def _confirm_ownership(work: Work, now, seconds: float, lease_needed) -> None:
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


# --- model call ----------------------------------------------------------------------------------
def _model_call(work: Work) -> None:
    cfg = work.agent_config
    messages, trimmed = fit_context(
        work.messages, _cfg("CONTEXT_TOKEN_BUDGET"), chars=work.messages_chars
    )
    request = llm.LLMRequest(
        model=cfg["model"],
        system=cfg["system_prompt"],
        messages=messages,
        tools=[_anthropic_tool(t) for t in cfg["tools"]],
        max_tokens=cfg.get("max_tokens", 1024),
        metadata={
            "turn": work.run.step_count,
            "run_id": str(work.run.pk),
            # The untrimmed request's size, which the engine keeps anyway (Work).
            "input_chars": _request_chars(work),
        },
    )
    response = _call_model_with_retries(work, request)
    _record_model_response(work, response, trimmed)


def _anthropic_tool(meta: dict) -> dict:
    return {
        "name": meta["name"],
        "description": meta["description"],
        "input_schema": meta["input_schema"],
    }


def fit_context(
    messages: list[dict], budget_tokens: int, *, chars: int | None = None
) -> tuple[list[dict], int]:
    """Drop the oldest assistant/tool-result turns until the estimate fits the budget.

    The first user message (the task) is kept, and a note says what was left out; turns go
    in pairs so every tool_use keeps its tool_result. The timeline keeps everything.
    `chars`: the conversation's canonical JSON length, when the caller keeps it.
    """
    if chars is None:
        chars = len(canonical_json(messages))
    if chars // 3 + 1 <= budget_tokens or len(messages) <= 3:
        return messages, 0
    head, rest = messages[0], messages[1:]
    dropped = 0
    while len(rest) > 2 and pricing.estimate_tokens(canonical_json([head, *rest])) > budget_tokens:
        rest = rest[2:]
        dropped += 1
    note = f"\n\n[{dropped} earlier turn(s) were left out to fit the context window.]"
    content = head["content"]
    if isinstance(content, str):
        head = {"role": "user", "content": content + note}
    else:
        head = {"role": "user", "content": [*content, {"type": "text", "text": note}]}
    return [head, *rest], dropped


def _call_model_with_retries(work: Work, request: llm.LLMRequest) -> llm.LLMResponse:
    max_retries = _cfg("LLM_MAX_RETRIES")
    attempt = 0
    while True:
        attempt += 1
        if attempt > 1:
            # After a backoff sleep: cancelled meanwhile, or out of wall time?
            _still_mine(work, lease_for=_cfg("LLM_TIMEOUT_SECONDS"))
        _release_db_connection()
        try:
            return work.provider.complete(request)
        except llm.LLMError as exc:
            retry = (
                exc.retryable
                and attempt <= max_retries
                and work.run.retry_count < _cfg("RUN_MAX_RETRIES")
            )
            _record_model_error(work, exc, attempt, will_retry=retry)
            if not retry:
                detail = f"model call failed after {attempt} attempt(s): {exc}"
                _terminate(work, Run.Termination.LLM_ERROR, detail)
            time.sleep(backoff(attempt, retry_after=exc.retry_after))


def backoff(
    attempt: int, *, retry_after: float | None = None, base: float | None = None, cap: float = 30.0
) -> float:
    """Exponential backoff with full jitter; a server's retry-after is a floor."""
    base = _cfg("RETRY_BASE_SECONDS") if base is None else base
    delay = random.uniform(0, min(cap, base * 2 ** (attempt - 1)))
    if retry_after:
        delay = max(delay, min(retry_after, cap))
    return delay


def _release_db_connection() -> None:
    # While we wait seconds on the model, the pooled connection serves other runs.
    if settings.IS_POSTGRES and not connection.in_atomic_block:
        connection.close()


def _record_model_error(work: Work, exc: llm.LLMError, attempt: int, *, will_retry: bool) -> None:
    run = work.run
    _append_owned(
        work,
        Step.Kind.LLM_ERROR,
        {
            "error": str(exc)[:2000],
            "status": exc.status,
            "attempt": attempt,
            "retryable": exc.retryable,
            "will_retry": will_retry,
        },
        {
            "retry_count": run.retry_count + 1,
            "error_count": run.error_count + 1,
            **_renewal(model_call_next=will_retry),
        },
    )


def _record_model_response(work: Work, response: llm.LLMResponse, trimmed: int) -> None:
    from approvals import gates

    tool_uses = response.tool_uses
    run = work.run
    # Planned before the write, so that step, counters and checkpoint are one statement;
    # only a gated call (an Approval and a gate step) needs a transaction of several.
    pending, repeated, gated = _plan_tool_calls(work, run.last_seq + 1, tool_uses, response)
    work.state["pending"] = pending
    data = {
        "model": response.model,
        "content": response.content,
        "stop_reason": response.stop_reason,
        "usage": response.usage.as_dict(),
        "request_id": response.request_id,
        "trimmed_turns": trimmed,
        "provider": work.provider.name,
    }
    counters = {
        "step_count": run.step_count + 1,
        "tokens_in": run.tokens_in + response.usage.total_input_tokens,
        "tokens_out": run.tokens_out + response.usage.output_tokens,
        "cost_usd": run.cost_usd + response.cost_usd,
        **_renewal(model_call_next=False),
    }
    columns = {
        "cost_usd": response.cost_usd,
        "tokens_in": response.usage.total_input_tokens,
        "tokens_out": response.usage.output_tokens,
        "latency_ms": response.latency_ms,
    }
    then: tuple = ()
    if not tool_uses:
        # The final answer and the run's end in one write: a crash between the two would
        # leave a finished conversation that a resume sends to the model again.
        ended, end_update = _termination(work, Run.Termination.COMPLETED, output=response.text)
        counters.update(end_update)
        then = ((Step.Kind.STATUS, ended, {}),)
    try:
        if tool_uses and not (gated or repeated):
            try:
                then = _run_inline(work, pending, counters)
            except Stop:
                raise
            except Exception:
                # Nothing is written yet: the run is retried from its checkpoint and asks
                # the model again, but this answer was paid for.
                _charge_discarded_response(work, response)
                raise
        if not gated:
            _append_owned(
                work, Step.Kind.LLM, data, counters, checkpoint=True, then=then, **columns
            )
        else:
            with transaction.atomic():
                _append_owned(work, Step.Kind.LLM, data, counters, **columns)
                for item, gate in gated:
                    item["approval"] = str(gates.open_gate(work.run, item, gate).pk)
                _checkpoint(work)
    except Stop:
        # Only the ownership checks raise Stop in there: cancelled or taken over meanwhile.
        _charge_discarded_response(work, response)
        raise
    work.add_message({"role": "assistant", "content": response.content})
    if not tool_uses:
        raise Stop
    for _, tool_data, _ in then:
        work.add_tool_result(_tool_result_block(tool_data))
    if repeated:
        _terminate(
            work,
            Run.Termination.NO_PROGRESS,
            f"{repeated} was called {NO_PROGRESS_REPEATS} times with the same arguments",
        )
    if gated:
        _wait_for_humans(work)


def _charge_discarded_response(work: Work, response: llm.LLMResponse) -> None:
    """The run was cancelled (or taken over) while the model answered: the answer is not
    used, but it was paid for, so the run's spend says so (no step: the run is not ours)."""
    log.info("run %s: discarding a %s USD response", work.run.pk, response.cost_usd)
    Run.objects.filter(pk=work.run.pk).update(
        cost_usd=F("cost_usd") + response.cost_usd,
        tokens_in=F("tokens_in")
        + response.usage.input_tokens
        + response.usage.cache_read_input_tokens,
        tokens_out=F("tokens_out") + response.usage.output_tokens,
    )


def _plan_tool_calls(
    work: Work, llm_seq: int, tool_uses: list[dict], response
) -> tuple[list[dict], str, list[tuple[dict, dict]]]:
    """Validate every proposed call and ask the gate policy about each, before running any:
    (pending calls, the tool repeated without progress or "", the gated calls with what to
    ask). No writes: the caller opens the gates with the model step, so parallel calls are
    decided together and nothing runs until all are decided.
    """
    from approvals import gates

    allowed = {t["name"] for t in work.agent_config["tools"]}
    recent: list[str] = work.state.setdefault("recent_calls", [])
    pending: list[dict] = []
    repeated = ""
    for index, use in enumerate(tool_uses):
        item: dict[str, Any] = {
            "id": use["id"],
            "name": use["name"],
            "input": use.get("input"),
            "llm_seq": llm_seq,
            "index": index,
            "args": None,
            "error": None,
            "approval": None,
        }
        tool = get_tool(use["name"]) if use["name"] in allowed else None
        if tool is None:
            item["error"] = f"unknown tool {use['name']!r}; available: {', '.join(sorted(allowed))}"
        else:
            try:
                item["args"] = tool.validate(use.get("input"))
            except ToolArgsError as exc:
                item["error"] = str(exc)
        if item["args"] is not None:
            call_key = hashlib.sha256(
                canonical_json([tool.name, item["args"]]).encode()
            ).hexdigest()[:16]
            recent.append(call_key)
            del recent[:-NO_PROGRESS_WINDOW]
            if recent.count(call_key) >= NO_PROGRESS_REPEATS and not repeated:
                repeated = tool.name
        pending.append(item)
    gated = []
    if not repeated:
        # Only now: a run about to stop for no progress must not leave approvals behind.
        for item in pending:
            if item["args"] is not None:
                gate = gates.gate_for_call(work.run, item, get_tool(item["name"]), response)
                if gate is not None:
                    gated.append((item, gate))
    return pending, repeated, gated


def _run_inline(work: Work, pending: list[dict], counters: dict) -> tuple:
    """Run the calls at the head of `pending` that have no side effects now, before the
    model step is written, and return their tool steps to go in the same write: one commit
    per iteration instead of one per step. A worker that dies before that write loses the
    model's answer (the resumed run asks again) and runs these calls again, which changes
    nothing; the answer, its calls and their results appear together once written.
    `counters` (the model step's update) takes in theirs; the calls from the first with
    side effects on stay pending, for the ledger's way.

    Each call is preceded by the checks a step boundary makes for a call without side
    effects (_still_mine): is the run still ours (read unless confirmed less than
    RECHECK_AFTER_SECONDS ago: a model call that took longer is followed by a read, so a
    cancel during it runs none of its calls), the lease, max_seconds (past it, the calls
    left stay pending and the next step stops the run before them).
    """
    errors = _error_counters(work.run)
    steps = []
    left = list(pending)
    while left:
        item = left[0]
        if item["error"]:
            data = _tool_step(errors, item, error=item["error"], attempts=0)
            steps.append((Step.Kind.TOOL, data, {}))
            left.pop(0)
            continue
        tool = get_tool(item["name"])
        if tool.has_side_effects or tool.name == ASK_OPERATOR:
            break
        if work.active_seconds >= work.run.max_seconds:
            break
        _still_mine(work, lease_for=tool.timeout_seconds, deadline=False)
        key = idempotency_key(work.run.pk, item["llm_seq"], item["index"], tool.name, item["args"])
        result, error, attempts, duration_ms = _call_tool(
            work, item, tool, item["args"], key, None, errors["retry_count"]
        )
        _fault_point(tool.name)
        data = _tool_step(
            errors,
            item,
            result=result,
            error=error,
            attempts=attempts,
            duration_ms=duration_ms,
            args=item["args"],
        )
        steps.append((Step.Kind.TOOL, data, {"latency_ms": duration_ms}))
        left.pop(0)
    counters.update(errors)
    counters.update(_renewal(model_call_next=not left))
    work.state["pending"] = left
    return tuple(steps)


def _wait_for_humans(work: Work) -> None:
    """Park the run in `waiting` (Stop), unless every decision is already in.

    The approvals were committed before this transaction; a quick decider may have decided
    them since, while the run was still `running` (so resume_after_decision could not
    requeue it). The decision service holds the run's row lock, so under that lock the count
    is exact: with nothing pending we return and the caller carries on instead.
    """
    with transaction.atomic():
        run = _locked_owned(work)
        waiting = Approval.objects.filter(run=run, status=Approval.Status.PENDING).count()
        if not waiting:
            # Decided between the gate and this pause: the decision found the run still
            # running and could not re-enqueue it, so pausing now would strand it.
            return
        run.transition_to(
            Run.Status.WAITING,
            status_detail=f"waiting for {waiting} decision(s)",
            lease_owner="",
            lease_expires_at=None,
        )
        run.append_step(
            Step.Kind.STATUS,
            {
                "event": "paused",
                "from": Run.Status.RUNNING,
                "to": Run.Status.WAITING,
                "reason": "waiting for a human",
                "detail": f"{waiting} pending decision(s)",
            },
        )
        work.run = run
    raise Stop


def _checkpoint(work: Work) -> None:
    # One INSERT .. ON CONFLICT DO UPDATE: update_or_create would cost a SELECT, an INSERT
    # and two savepoints (bench/engine_throughput.py). The hot path writes it with its step
    # (_append_owned); this is for the transactions that open approvals.
    sql.insert(
        Checkpoint(run=work.run, seq=work.run.last_seq, state=work.state),
        CHECKPOINT_COLUMNS,
        conflict=("run", "seq"),
        update_names=("state",),
    )


# --- tool calls ----------------------------------------------------------------------------------
def _run_pending_tools(work: Work) -> None:
    pending = work.state["pending"]
    approval_ids = [p["approval"] for p in pending if p.get("approval")]
    approvals = (
        {str(a.pk): a for a in Approval.objects.filter(pk__in=approval_ids)} if approval_ids else {}
    )
    if any(a.status == Approval.Status.PENDING for a in approvals.values()):
        _wait_for_humans(work)
        return  # decided meanwhile: the next step reads the decisions afresh
    item = pending[0]
    tool = get_tool(item["name"])
    # The step boundary: stop if cancelled, renew the lease. Tool timeouts are seconds, well
    # within a lease, so a dead worker's run is picked up one lease after its last renewal.
    _still_mine(work, must_read=tool is None or tool.has_side_effects)
    approval = approvals.get(item.get("approval") or "")
    if item["error"] or tool is None:
        _record_tool_result(work, item, error=item["error"] or "unknown tool", attempts=0)
        return
    args = item["args"]
    if approval is not None:
        decided = _apply_decision(work, item, tool, approval)
        if decided is None:
            return
        # From here on the item is the approved call (an approver may have edited it): the
        # tool step records it, and an "outcome unknown" retry re-runs it, not the proposal.
        item["args"] = args = decided
    if tool.name == ASK_OPERATOR:
        # Answered questions are handled in _apply_decision; an un-gated ask cannot happen.
        _record_tool_result(work, item, error="question was not answered", attempts=0)
        return
    _execute(work, item, tool, args)


def _apply_decision(work: Work, item: dict, tool: Tool, approval: Approval) -> dict | None:
    """The arguments to execute, or None when the decision itself produced the tool result."""
    who = approval.decided_by.get_username() if approval.decided_by else "the system"
    if approval.status == Approval.Status.APPROVED:
        args = approval.final_args
        # The executed call must be exactly the one the approver saw and approved.
        expected = approval.approved_args_hash or approval.args_hash
        if args_hash(tool.name, args) != expected:
            _record_tool_result(
                work, item, error="approved arguments do not match; not executed", attempts=0
            )
            return None
        return args
    if approval.status == Approval.Status.ANSWERED:
        if approval.side_effect_id:
            return _resolve_unknown_outcome(work, item, tool, approval)
        _record_tool_result(
            work, item, result={"answer": approval.answer, "answered_by": who}, attempts=0
        )
        return None
    if approval.status == Approval.Status.REJECTED:
        message = f"rejected by {who}: {approval.reason or 'no reason given'}"
        _record_tool_result(work, item, error=message, attempts=0, counts_as_error=False)
        if tool.on_reject == "fail_run":
            _terminate(work, Run.Termination.REJECTED, message)
        return None
    # Expired.
    message = f"approval expired at {approval.decided_at:%Y-%m-%d %H:%M} UTC; not executed"
    _record_tool_result(work, item, error=message, attempts=0, counts_as_error=False)
    if approval.on_expiry == "fail":
        _terminate(work, Run.Termination.APPROVAL_EXPIRED, message)
    return None


def _resolve_unknown_outcome(work: Work, item: dict, tool: Tool, approval: Approval) -> dict | None:
    effect = SideEffect.objects.get(pk=approval.side_effect_id)
    # Only an explicit "did not happen" repeats an effect that cannot be de-duplicated; any
    # other answer (including an unclear one) keeps it at most once.
    if approval.answer.strip().lower() != "did_not_happen":
        result = {
            "outcome": "confirmed by an operator"
            if approval.answer.strip().lower() == "happened"
            else "not repeated",
            "answer": approval.answer,
            "confirmed_by": approval.decided_by.get_username() if approval.decided_by else None,
        }
        with transaction.atomic():
            SideEffect.objects.filter(pk=effect.pk).update(
                status=SideEffect.Status.COMMITTED, result=result
            )
        _record_tool_result(
            work, item, result=result, attempts=effect.attempts, key=effect.key, args=effect.args
        )
        return None
    # The operator says it did not happen: run it again under the same key, once. If this
    # attempt dies too, the attempt count moves on and a person is asked again.
    with transaction.atomic():
        _locked_owned(work)
        item["approval"] = None
        item["cleared_at_attempt"] = effect.attempts
        _checkpoint(work)
    # The ledger holds the arguments that really ran (an approver may have edited them).
    return effect.args


def idempotency_key(run_id, llm_seq: int, index: int, tool: str, args: dict) -> str:
    body = canonical_json([str(run_id), llm_seq, index, tool, args])
    return hashlib.sha256(body.encode()).hexdigest()


def _execute(work: Work, item: dict, tool: Tool, args: dict) -> None:
    run = work.run
    key = idempotency_key(run.pk, item["llm_seq"], item["index"], tool.name, args)
    effect = None
    if tool.has_side_effects:
        effect = SideEffect.objects.filter(key=key).first()
        if effect and effect.status in (SideEffect.Status.COMMITTED, SideEffect.Status.FAILED):
            # Recorded before a crash: never run it again; report what happened then.
            stored = effect.result or {}
            _record_tool_result(
                work,
                item,
                result=stored.get("result"),
                error=stored.get("error"),
                attempts=effect.attempts,
                key=key,
                ledger=None,
                args=args,
            )
            return
        if effect is None:
            effect = SideEffect.objects.create(
                key=key, run=run, step_seq=item["llm_seq"], tool=tool.name, args=args
            )
        else:
            # An intent without an outcome: a worker died between the call and its record.
            cleared = item.get("cleared_at_attempt") == effect.attempts
            if not (cleared or tool.accepts_idempotency_key):
                _outcome_unknown(work, item, tool, effect)
            SideEffect.objects.filter(pk=effect.pk).update(
                status=SideEffect.Status.INTENT, attempts=F("attempts") + 1
            )
            effect.attempts += 1

    result, error, attempts, duration_ms = _call_tool(
        work, item, tool, args, key, effect, run.retry_count
    )
    _fault_point(tool.name)
    _record_tool_result(
        work,
        item,
        result=result,
        error=error,
        attempts=attempts,
        key=key if effect else "",
        ledger=effect,
        duration_ms=duration_ms,
        args=args,
    )


def _call_tool(
    work: Work,
    item: dict,
    tool: Tool,
    args: dict,
    key: str,
    effect: SideEffect | None,
    retry_count: int,
) -> tuple[Any, str | None, int, int]:
    """Call the tool under its circuit breaker, retrying infrastructure errors as its policy
    and the run's retries so far (`retry_count`) allow: (result, error, attempts, duration
    in ms)."""
    run = work.run
    result, error, attempts, started = None, None, 0, time.monotonic()
    while True:
        attempts += 1
        if not breaker.allow(tool.name):
            error = f"{tool.name} is temporarily unavailable (circuit open after repeated failures)"
            break
        ctx = ToolContext(
            run_id=str(run.pk),
            idempotency_key=key,
            deadline=time.monotonic() + tool.timeout_seconds,
        )
        try:
            result = tool.call(args, ctx)
            breaker.record(tool.name, ok=True)
            break
        except ToolError as exc:
            breaker.record(tool.name, ok=True)
            error = str(exc)
            break
        except ToolInfraError as exc:
            breaker.record(tool.name, ok=False)
            if effect is not None and not tool.accepts_idempotency_key:
                # A timeout or dropped connection says nothing about whether the effect
                # happened, and this tool cannot de-duplicate a retry: a person decides.
                log.warning("run %s: %s failed with %s; outcome unknown", run.pk, tool.name, exc)
                _outcome_unknown(work, item, tool, effect)
            # Capped per call by the tool's policy and per run by RUN_MAX_RETRIES.
            run_budget_left = retry_count + attempts - 1 < _cfg("RUN_MAX_RETRIES")
            if attempts >= tool.retry.max_attempts or not run_budget_left:
                error = f"{exc} (after {attempts} attempts)"
                break
            time.sleep(backoff(attempts, base=tool.retry.base_seconds, cap=tool.retry.max_seconds))
        except Exception as exc:  # a bug in a tool must not kill the run
            log.exception("tool %s crashed", tool.name)
            breaker.record(tool.name, ok=False)
            error = f"{tool.name} failed: {type(exc).__name__}: {exc}"
            break
    return result, error, attempts, int((time.monotonic() - started) * 1000)


def _fault_point(tool_name: str) -> None:
    """Fault injection for the crash-resume test: die between the effect and its record."""
    if os.environ.get("AGENTOPS_FAULT_KILL_AFTER_TOOL") == tool_name:
        os.kill(os.getpid(), signal.SIGKILL)


def _outcome_unknown(work: Work, item: dict, tool: Tool, effect: SideEffect) -> None:
    """An intent without an outcome, for a tool that cannot de-duplicate: ask a person."""
    from approvals import gates

    with transaction.atomic():
        run = _locked_owned(work)
        SideEffect.objects.filter(pk=effect.pk).update(status=SideEffect.Status.UNKNOWN)
        approval = gates.open_outcome_question(run, item, tool, effect)
        item["approval"] = str(approval.pk)
        _checkpoint(work)
        work.run = run
    _wait_for_humans(work)
    raise StepAgain  # answered already: the next step applies the answer


def _record_tool_result(
    work: Work, item: dict, *, ledger: SideEffect | None = None, **call: Any
) -> None:
    """Record a call (_tool_step's keywords) as a step of its own, with its ledger outcome
    when it has an entry there."""
    counters = _error_counters(work.run)
    data = _tool_step(counters, item, **call)
    outcome = {
        "status": SideEffect.Status.FAILED if data["is_error"] else SideEffect.Status.COMMITTED,
        "result": {"error": data["error"]} if data["is_error"] else {"result": data["result"]},
    }
    work.state["pending"] = pending = work.state["pending"][1:]
    update = {**counters, **_renewal(model_call_next=not pending)}
    try:
        # With a ledger entry, its outcome commits with the step; without, the step is one
        # statement of its own (no transaction around it).
        with transaction.atomic() if ledger is not None else nullcontext():
            _append_owned(
                work, Step.Kind.TOOL, data, update, checkpoint=True, latency_ms=data["duration_ms"]
            )
            if ledger is not None:
                SideEffect.objects.filter(pk=ledger.pk).update(**outcome)
    except Stop:
        # Cancelled (or taken over) while the call was in flight: the effect happened all
        # the same, so the ledger must say so, or a resume would doubt or repeat it.
        if ledger is not None:
            SideEffect.objects.filter(pk=ledger.pk, status=SideEffect.Status.INTENT).update(
                **outcome
            )
        raise
    work.add_tool_result(_tool_result_block(data))


def _error_counters(run: Run) -> dict:
    return {
        "retry_count": run.retry_count,
        "error_count": run.error_count,
        "consecutive_errors": run.consecutive_errors,
    }


def _tool_step(
    counters: dict,
    item: dict,
    *,
    result: Any = None,
    error: str | None = None,
    attempts: int,
    key: str = "",
    duration_ms: int = 0,
    counts_as_error: bool = True,
    args: dict | None = None,
) -> dict:
    """A tool step's data; moves `counters` (_error_counters) on to what they are after it."""
    is_error = error is not None
    data = {
        "tool_use_id": item["id"],
        "tool": item["name"],
        # What ran (an approver may have edited the model's arguments), else what was asked.
        "args": args if args is not None else (item["args"] or item.get("input")),
        "is_error": is_error,
        "attempts": attempts,
        "duration_ms": duration_ms,
        "idempotency_key": key,
    }
    if item.get("approval"):
        data["approval"] = item["approval"]
    if is_error:
        data["error"] = error
    else:
        data["result"] = result
    counters["retry_count"] += max(0, attempts - 1)
    if is_error and counts_as_error:
        counters["error_count"] += 1
        counters["consecutive_errors"] += 1
    elif not is_error:
        counters["consecutive_errors"] = 0
    return data


# --- slices, crashes, sweep ----------------------------------------------------------------------
def runs_waiting() -> bool:
    """Whether tasks wait in the broker's queue for a worker thread (a run yields its time
    slice only then). Unknown, with the broker unreachable, counts as yes."""
    from agentops.celery import app

    try:
        with app.pool.acquire(block=True, timeout=2) as conn:
            # One attempt: with the broker down the answer is "unknown", now, not after
            # kombu's reconnect loop.
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=1)
            # Not passive: Redis drops an empty list, and a passive declare then says
            # "no such queue" where the answer is "empty".
            queue = conn.default_channel.queue_declare(queue=app.conf.task_default_queue)
            return queue.message_count > 0
    except Exception as exc:
        log.debug("queue length unknown (%s); yielding the slice", exc)
        return True


def _yield_slice(work: Work) -> str:
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
            transaction.on_commit(lambda: enqueue(work.run.pk))
    return "requeued" if updated else "busy"


def _on_crash(run_id, worker: str, exc: Exception) -> str:
    """An unexpected error: record it, then retry later (capped), or fail the run."""
    try:
        with transaction.atomic():
            run = Run.locked(run_id)
            if run.lease_owner != worker or run.status != Run.Status.RUNNING:
                return run.status
            run.append_step(
                Step.Kind.STATUS,
                {
                    "event": "error",
                    "from": Run.Status.RUNNING,
                    "to": Run.Status.RUNNING,
                    "detail": f"{type(exc).__name__}: {exc}"[:2000],
                },
            )
            if run.retry_count + 1 >= _cfg("RUN_MAX_RETRIES"):
                run.transition_to(
                    Run.Status.FAILED,
                    termination_reason=Run.Termination.CONSECUTIVE_ERRORS,
                    status_detail=f"engine error: {exc}"[:500],
                )
                run.append_step(
                    Step.Kind.STATUS,
                    {
                        "event": "terminated",
                        "from": Run.Status.RUNNING,
                        "to": Run.Status.FAILED,
                        "reason": Run.Termination.CONSECUTIVE_ERRORS,
                        "detail": "repeated engine errors",
                    },
                )
                return Run.Status.FAILED
            Run.objects.filter(pk=run.pk).update(retry_count=F("retry_count") + 1)
            run.transition_to(Run.Status.QUEUED, lease_owner="", lease_expires_at=None)
            transaction.on_commit(lambda: enqueue(run_id, countdown=backoff(run.retry_count + 1)))
            return "requeued"
    except Exception:
        log.exception("run %s: could not record the error", run_id)
        return "error"


def sweep(now=None) -> int:
    """Re-enqueue runs whose worker died (lease expired) or whose queue message was lost."""
    ids = list(Run.objects.lease_expired(now).values_list("pk", flat=True)[:500])
    # A queued run is re-sent at most once per staleness window, so a backlog is not
    # flooded with duplicate messages on every sweep (duplicates are harmless, not free).
    Run.objects.filter(pk__in=ids, status=Run.Status.QUEUED).update(updated_at=timezone.now())
    for run_id in ids:
        enqueue(run_id)
    return len(ids)


def resume_after_decision(run: Run) -> bool:
    """Waiting -> queued once no decision is pending; call under the run's row lock."""
    if Approval.objects.filter(run=run, status=Approval.Status.PENDING).exists():
        return False
    if not run.transition_to(Run.Status.QUEUED, status_detail="", expect=Run.Status.WAITING):
        return False
    run.append_step(
        Step.Kind.STATUS,
        {
            "event": "resumed",
            "from": Run.Status.WAITING,
            "to": Run.Status.QUEUED,
            "detail": "all decisions made",
        },
    )
    transaction.on_commit(lambda: enqueue(run.pk))
    return True
