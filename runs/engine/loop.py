"""The loop: launch a run, then advance it one step after another for a time slice.
Why and how: docs/design/modules.md."""

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db import transaction
from django.utils import timezone

from accounts.models import User
from agentkit import agents, llm, logs, tracing
from agentkit.agents import Agent, Limits
from agentkit.tools import get_tool

from .. import events, queue, sql
from ..models import (
    CHECKPOINT_COLUMNS,
    RUN_COLUMNS,
    STEP_COLUMNS,
    Checkpoint,
    Run,
    Step,
    canonical_json,
)
from . import (
    answer_check,
    awaiting,
    budget_check,
    compensating,
    gates,
    humans,
    in_flight,
    lease,
    ledger,
    model,
    owned,
    pii_guard,
    replaying,
    steering,
    terminator,
    tool_calls,
)
from .conversation import CONVERSATION_KINDS, messages, tool_result_block
from .owned import StepAgain, Stop, Work, carried_chars, cfg, initial_state
from .tool_calls import ASK_OPERATOR

log = logging.getLogger("agentops.engine")


@dataclass(frozen=True)
class ForkPoint:
    """Where a forked run starts: its origin's conversation and engine state at a checkpoint
    (history/fork.py builds it). The launched step carries the conversation, so the new run's
    timeline is whole by itself; the origin is only read."""

    origin: str  # the run's id
    seq: int  # the step after which the checkpoint was saved
    messages: list[dict]
    state: dict
    instruction: str = ""
    checkpoint: Checkpoint | None = None  # None when only its copy is at hand (a replay)

    @property
    def model_calls(self) -> int:
        """The model turns in the conversation (a fork's included): the new run's count
        goes on from there, so a scripted model goes on with the next turn."""
        return sum(1 for m in self.messages if m["role"] == "assistant")


def launch(
    *,
    agent: Agent,
    input: dict,
    limits: Limits | None = None,
    trigger: str = Run.Trigger.API,
    launched_by: User | None = None,
    parent: Run | None = None,
    provider: str | None = None,
    source: str = "",
    fork: ForkPoint | None = None,
    compensating: list[dict] | None = None,
) -> Run:
    """Create a queued run from already validated input and enqueue it after commit.
    `source`: who or what pulled the trigger (Run.source); `fork`: the checkpoint of another
    run it continues from; `compensating`: the calls a compensation run makes, and nothing
    else (compensating.py: pending calls, gated again, each under its own ledger key)."""
    limits = limits or agent.limits
    run = _new_run(
        agent,
        input,
        limits,
        trigger=trigger,
        launched_by=launched_by,
        parent=parent,
        source=source[:200],
    )
    run.provider = provider or llm.default_provider_name()
    launched = {
        "input": input,
        "prompt": agent.prompt(input),
        "limits": limits.as_dict(),
        "provider": run.provider,
    }
    state = initial_state()
    if fork is not None:
        run.forked_from = fork.checkpoint
        run.step_count = fork.model_calls
        launched["forked_from"] = {"run": fork.origin, "seq": fork.seq}
        launched["history"] = fork.messages
        if fork.instruction:
            launched["instruction"] = fork.instruction
        state = fork.state
    if compensating is not None:
        state["pending"] = compensating
        state["compensating"] = [item["key"] for item in compensating]
        launched["compensates"] = [
            {"effect": item["effect"], "tool": item["name"], "args": item["args"]}
            for item in compensating
        ]
    step = run.first_step(by=launched_by.get_username() if launched_by else None, **launched)
    checkpoint = Checkpoint(
        run=run, seq=step.seq, state=state, created_at=run.created_at, run_created=run.created_at
    )
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
    transaction.on_commit(lambda: queue.enqueue(run.pk, agent=run.agent))
    return run


def _new_run(agent: Agent, input: dict, limits: Limits, **fields: Any) -> Run:
    now = timezone.now()
    run = Run(
        agent=agent.slug,
        agent_config=agent.snapshot(),
        input=input,
        max_steps=limits.max_steps,
        max_cost_usd=limits.max_cost_usd,
        max_seconds=limits.max_seconds,
        max_consecutive_errors=limits.max_consecutive_errors,
        created_at=now,
        updated_at=now,
        # A child of the launching request's span (or of a parent run's step).
        traceparent=tracing.new_run_traceparent(),
        **fields,
    )
    # The one line lists, the run page and the API show: summarised from the input as the
    # timeline keeps it (masked under a PII policy), before it is cut to length, so a cut
    # never leaves half a card number that no detector would recognise.
    run.input_summary = agent.summarize(run.masked(input))
    return run


# What advance() says of a run whose model call it left in flight (in_flight.py).
IN_FLIGHT = "in flight"


@logs.about_run
def advance(
    run_id: UUID | str,
    *,
    worker: str | None = None,
    time_slice: float | None = None,
    calls_in_flight: bool = False,
) -> str:
    """Work on a run for up to one time slice. Returns what happened, for logs and tests:
    "busy" (someone else has it or it is not runnable), "requeued", IN_FLIGHT (its model call
    is awaited on the process's loop, with `calls_in_flight`), or the run's status."""
    worker = worker or lease.new_worker_id()
    claimed = lease.claim(run_id, worker)
    if claimed is None:
        return "busy"

    def load() -> Work:
        work = _load(claimed.run, worker, claimed=claimed)
        work.calls_in_flight = calls_in_flight
        terminator.refuse_unsound_gates(work)  # raises Stop: nothing of it runs
        return work

    return work_on(run_id, worker, load, time_slice=time_slice)


def work_on(
    run_id: UUID | str,
    worker: str,
    load: Callable[[], Work],
    *,
    first: Callable[[Work], object] | None = None,
    time_slice: float | None = None,
) -> str:
    """Steps of the run this worker holds, for up to one time slice: `first(work)` (an
    answer that arrived for a call in flight), then the next steps. Returns as advance."""
    slice_seconds = time_slice if time_slice is not None else cfg("TIME_SLICE_SECONDS")
    slice_end = time.monotonic() + slice_seconds
    work = None
    try:
        work = load()
        if first is not None:
            first(work)
        while not work.in_flight:
            step(work)
            if time.monotonic() >= slice_end and not work.in_flight:
                if queue.runs_waiting():
                    return lease.yield_slice(work)
                # Nobody waits for a worker: re-queueing would only cost a claim and a
                # re-read of the timeline.
                slice_end = time.monotonic() + slice_seconds
        in_flight.send(work, lambda first: work_on(run_id, worker, lambda: work, first=first))
        return IN_FLIGHT
    except Stop:
        # Our own last write says where it stopped, unless the run was taken from us.
        if work is not None and work.run.status != Run.Status.RUNNING:
            return work.run.status
        return Run.objects.filter(pk=run_id).values_list("status", flat=True).first() or "gone"
    except Exception as exc:
        log.exception("run %s: unexpected error", run_id)
        return lease.on_crash(run_id, worker, exc)


def _load(run: Run, worker: str, *, claimed: lease.Claimed | None = None) -> Work:
    latest = sql.select(Checkpoint, ("state",), {"run": run.pk}, order_by=("-seq",), limit=1)
    state = latest[0][0] if latest else initial_state()
    rows = sql.select(
        Step,
        ("seq", "kind", "data"),
        {"run": run.pk, "kind": tuple(CONVERSATION_KINDS)},
        order_by=("seq",),
    )
    conversation = messages((kind, data) for _, kind, data in rows)
    chars = carried_chars(state, run.pk, rows[-1][0] if rows else None)
    if chars is None:
        chars = len(canonical_json(conversation))
    recording = replaying.current()
    work = Work(
        run=run,
        agent_config=run.agent_config,
        state=state,
        messages=conversation,
        messages_chars=chars,
        chars_exact=True,
        worker=worker,
        provider=recording.provider if recording else agents.provider_for_run(run),
        # Kept on the run by park() and resume(); a claimed run is not in a wait.
        waited=run.waiting_seconds,
        confirmed_at=time.monotonic(),
        lease_until=run.lease_expires_at,
    )
    if claimed is not None:
        # A pause asked after the claim's read is seen at the first look (steering.py), as
        # one asked just after any look is.
        owned.saw(work, run.pause_requested_at, claimed.beside, claimed.read_at)
    return work


def step(work: Work) -> None:
    """One unit of progress: run the next pending tool call, or make the next model call."""
    run = work.run
    logs.set_seq(run.last_seq + 1)
    with tracing.step(run.traceparent, run_id=run.pk, agent=run.agent, seq=run.last_seq + 1):
        _step(work)


def _step(work: Work) -> None:
    try:
        # An operator may have asked for a pause or sent instructions (one read a second).
        steering.at_boundary(work)
        if "checking" in work.state:
            # A final answer or a call the agent declared checks for, before anything else.
            answer_check.check(work)
        elif work.state["pending"]:
            budget_check.at_boundary(work)
            _next_pending_call(work)
        else:
            # An operator may have cancelled the run since our last write: stop before paying
            # for another model call (and hold the lease for as long as that call may take).
            lease.still_mine(work, lease_for=cfg("LLM_TIMEOUT_SECONDS"))
            if work.state.get("awaiting"):
                awaiting.settle(work)
            if "compensating" in work.state:
                compensating.finish(work)  # its calls are made: it ends, no model call
            steering.errors_choice(work)  # on_failure="ask": errors wait for an operator
            terminator.precheck(work)
            budget_check.at_boundary(work)
            humans.continue_checkpoint(work)
            steering.deliver_instructions(work)
            model.ask(work)
    except StepAgain:
        pass


def _run_together(work: Work) -> None:
    """The read-only calls at the head of the pending ones, run together (parallel.py), and
    their steps written in one append, in the order the model asked for them."""
    lease.still_mine(work)
    counters: dict = {}
    steps = tool_calls.run_inline(work, work.state["pending"], counters)
    (kind, data, columns), *rest = steps
    owned.append(work, kind, data, counters, checkpoint=True, then=tuple(rest), **columns)
    for kind, data, _ in steps:
        if kind == Step.Kind.TOOL:
            work.add_tool_result(tool_result_block(data))


def _next_pending_call(work: Work) -> None:
    """The first pending call: wait for its decision, apply it, and run the call."""
    pending = work.state["pending"]
    if pending[0].get("recovery"):
        # A failure held for an operator: parks, sets a retry up, or records their choice.
        ledger.record_tool_result(work, pending[0], **steering.apply_choice(work, pending[0]))
        return
    if any(p.get("regate") for p in pending):
        humans.regate(work)  # calls a fork inherited: the gate policy has its say again
    approval_ids = [p["approval"] for p in pending if p.get("approval")]
    decisions = gates.current().decisions(approval_ids) if approval_ids else {}
    if any(d.status == gates.PENDING for d in decisions.values()):
        lease.park_for_humans(work)
        return  # decided meanwhile: the next step reads the decisions afresh
    item = pending[0]
    if tool_calls.together_next(work) > 1:
        _run_together(work)  # read-only calls after another's decision: at once, one write
        return
    tool = get_tool(item["name"])
    # The step boundary: stop if cancelled, renew the lease. Tool timeouts are seconds, well
    # within a lease, so a dead worker's run is picked up one lease after its last renewal.
    lease.still_mine(work, must_read=tool is None or tool.has_side_effects)
    decision = decisions.get(item.get("approval") or "")
    if item["error"] or tool is None:
        ledger.record_tool_result(work, item, error=item["error"] or "unknown tool", attempts=0)
        return
    if pii_guard.held_output(item):
        pii_guard.settle_output(work, item, decision)  # the run ends either way
    args = item["args"]
    if decision is not None:
        args = humans.apply_decision(work, item, tool, decision)
        if args is None:
            return
        # From here on the item is the approved call (an approver may have edited it): the
        # tool step records it, and an "outcome unknown" retry re-runs it, not the proposal.
        item["args"] = args
    if tool.name == ASK_OPERATOR:
        # Answered questions are handled by apply_decision; an un-gated ask cannot happen.
        ledger.record_tool_result(work, item, error="question was not answered", attempts=0)
        return
    ledger.execute(work, item, tool, args)
