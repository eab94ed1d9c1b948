"""The run a worker owns: what it holds in memory, and the writes it makes under its lease.

`Work` is the run as one worker sees it: the row as last written, the checkpointed state,
the model's conversation. Every write goes through `append`: a compare-and-set on the
run's row (still running, still ours), the step hash-chained to the timeline, the run's
counters and a renewed lease, and the checkpoint, in one statement on Postgres. Nothing here
decides what to do next; it may not call the model or tools.
"""

import functools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from accounts.models import TeamAgent

from .. import sql
from ..models import (
    CHECKPOINT_COLUMNS,
    Budget,
    Checkpoint,
    Instruction,
    Run,
    Step,
    canonical_json,
    checkpoint_conflict,
)
from .conversation import insert_tool_result

LEASE_MARGIN = 1.25  # a lease outlasts a call's timeout by this factor, to record its result
# Ownership confirmed by this worker's own write or read less than this long ago is not
# read again before a model call or a tool without side effects: a cancel landing in that
# window is seen when the step is recorded (the same as a cancel landing just after the
# read), and what the call returned is discarded then. Calls with side effects always read
# first.
RECHECK_AFTER_SECONDS = 1.0

log = logging.getLogger("agentops.engine")


def cfg(name: str) -> Any:
    return settings.AGENTOPS[name]


def lease_seconds() -> float:
    return float(cfg("LEASE_SECONDS"))


def initial_state() -> dict:
    return {"pending": [], "recent_calls": []}


def release_connection() -> None:
    """While the model thinks (seconds), the pooled connection serves other runs."""
    if settings.IS_POSTGRES and not connection.in_atomic_block:
        connection.close()


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
    # Whether messages_chars is what the timeline's conversation measures (as at a claim):
    # only then is it carried in the checkpoint for the next claim (CHARS, carried_chars).
    chars_exact: bool = False
    # The system prompt and tool schemas' length as canonical JSON (terminator.request_chars).
    head_chars: int | None = None
    # When (monotonic) the run's row was last read for an operator's pause or instructions,
    # and whether instructions wait for the next model turn (steering.py).
    steer_read_at: float = float("-inf")
    instructions_waiting: bool = False
    # What that read said: an operator asked for a pause; the agent has a budget (until a read
    # says otherwise it is assumed to have one: budget_check.py then reads its budgets).
    pause_asked: bool = False
    has_budget: bool = True
    # Whether model calls may be awaited on the process's loop (a Celery worker's runs), and
    # whether one is now: this thread then lets go of the run (in_flight.py).
    calls_in_flight: bool = False
    in_flight: bool = False

    def add_message(self, message: dict) -> None:
        self.messages.append(message)
        self._count(message)

    def add_tool_result(self, block: dict) -> None:
        last = self.messages[-1]
        if last["role"] == "user" and isinstance(last["content"], list):
            insert_tool_result(last["content"], block)
            self._count(block)
        else:
            self.add_message({"role": "user", "content": [block]})

    def _count(self, value: dict) -> None:
        text = canonical_json(value)
        self.messages_chars += len(text) + 1
        if "e+" in text or "-0.0" in text:
            # Maybe a float Postgres stores otherwise (1e+16 comes back 10000000000000000,
            # -0.0 as 0.0): the conversation rebuilt from the timeline may measure otherwise.
            self.chars_exact = False

    def add_user_text(self, text: str) -> None:
        """A text block for the next user message (after any tool results there)."""
        # Its steps are written off the model step's path (awaiting, answer checks): not
        # followed step by step here, so the next claim measures the conversation again.
        self.chars_exact = False
        block = {"type": "text", "text": text}
        last = self.messages[-1]
        if last["role"] == "user" and isinstance(last["content"], list):
            last["content"].append(block)
            self._count(block)
        else:
            self.add_message({"role": "user", "content": [block]})

    def add_operator_text(self, block: dict) -> None:
        """An operator's instruction for the next model call: in the last message when it
        is the user's, else a user message of its own (as conversation.messages rebuilds it)."""
        self.chars_exact = False
        last = self.messages[-1] if self.messages else None
        if last is not None and last["role"] == "user":
            content = last["content"]
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            last["content"] = [*content, block]
        else:
            self.add_message({"role": "user", "content": [block]})

    @property
    def active_seconds(self) -> float:
        return self.run.elapsed_seconds - self.waited

    def tool_schemas(self) -> list[dict]:
        """The agent's tools as the Messages API takes them."""
        return [
            {"name": t["name"], "description": t["description"], "input_schema": t["input_schema"]}
            for t in self.agent_config["tools"]
        ]


@functools.cache
def beside_run() -> tuple[str, str]:
    """Conditions read with the run's row wherever a worker reads it (the claim, `look`), so
    that they cost no statement of their own: whether an operator's instructions wait for
    delivery (steering.py), and whether the run's agent has a budget (budget_check.py: an
    agent without one then reads nothing at a step boundary)."""
    q = connection.ops.quote_name
    run = q(Run._meta.db_table)

    def column(model: Any, name: str) -> str:
        return f"{q(model._meta.db_table)}.{q(model._meta.get_field(name).column)}"

    instructions = (
        f"EXISTS (SELECT 1 FROM {q(Instruction._meta.db_table)} "
        f"WHERE {column(Instruction, 'run')} = {run}.{q('id')} "
        f"AND {column(Instruction, 'delivered_seq')} IS NULL)"
    )
    # Its own budget, or one of a team that owns it (runs/budgets/models.py).
    owners = (
        f"SELECT {column(TeamAgent, 'team')} FROM {q(TeamAgent._meta.db_table)} "
        f"WHERE {column(TeamAgent, 'agent')} = {run}.{q('agent')}"
    )
    budget = (
        f"EXISTS (SELECT 1 FROM {q(Budget._meta.db_table)} "
        f"WHERE {column(Budget, 'agent')} = {run}.{q('agent')} "
        f"OR {column(Budget, 'team')} IN ({owners}))"
    )
    return instructions, budget


def saw(work: Work, pause_requested_at: datetime | None, beside: Sequence[Any], at: float) -> None:
    """Note what a read of the run's row (at `at`, monotonic) said for steering and budgets."""
    instructions, budget = beside
    work.steer_read_at = at
    work.pause_asked = pause_requested_at is not None
    work.instructions_waiting = work.instructions_waiting or instructions
    work.has_budget = budget


def look(work: Work) -> None:
    """A look at the run's row (steering.py's once a second): Stop if it is no longer this
    worker's; else what it says for steering and budgets, and ownership confirmed, so that
    lease.still_mine need not read it again within RECHECK_AFTER_SECONDS."""
    rows = sql.select(
        Run,
        ("status", "lease_owner", "lease_expires_at", "pause_requested_at"),
        {"id": work.run.pk},
        also=beside_run(),
    )
    now = time.monotonic()
    if not rows or rows[0][:2] != (Run.Status.RUNNING, work.worker):
        raise Stop
    _, _, lease_until, pause_requested_at, *beside = rows[0]
    saw(work, pause_requested_at, beside, now)
    work.confirmed_at = now
    work.lease_until = lease_until


def renewal(*, model_call_next: bool) -> dict:
    """Lease fields for a step's write: long enough for the next call to finish and be
    recorded under it (a model call may take its whole timeout)."""
    seconds = lease_seconds()
    if model_call_next:
        seconds = max(seconds, cfg("LLM_TIMEOUT_SECONDS") * LEASE_MARGIN)
    now = timezone.now()
    return {"lease_expires_at": now + timedelta(seconds=seconds), "updated_at": now}


def append(
    work: Work,
    kind: str,
    data: dict,
    update: dict,
    *,
    checkpoint: bool = False,
    then: tuple[tuple[str, dict, dict], ...] = (),
    also: Sequence[sql.Update] = (),
    counted: bool = False,
    **columns: Any,
) -> Step:
    """Append a step to the run this worker holds, writing the run's new counters and a
    renewed lease in the same UPDATE (one compare-and-set, no locked read first), the
    `then` steps after it, with `checkpoint` the engine state as it is now, at the last
    of them, and the `also` updates of other rows. Stop if the run is no longer ours.
    `counted`: work.messages already has what these steps add to the conversation (the
    model step's path), so the checkpoint can carry its length; any other write ends that.

    Outside `atomic` on Postgres this is one statement: one round trip, its own transaction.
    """
    if not counted:
        work.chars_exact = False
    elif checkpoint:
        _carry_chars(work, work.run.last_seq + 1 + len(then))
    step = work.run.append_step_if_expected(
        kind,
        data,
        expect={"status": Run.Status.RUNNING, "lease_owner": work.worker},
        update=update,
        checkpoint=work.state if checkpoint else None,
        then=then,
        also=also,
        **columns,
    )
    if step is None:
        # Someone else wrote to the run: a cancel, a takeover, or a decision's step.
        step = _append_after_another_write(
            work, kind, data, update, checkpoint, then, also, columns
        )
    work.confirmed_at = time.monotonic()
    work.lease_until = work.run.lease_expires_at
    return step


def _append_after_another_write(
    work: Work,
    kind: str,
    data: dict,
    update: dict,
    checkpoint: bool,
    then: tuple,
    also: Sequence[sql.Update],
    columns: dict,
) -> Step:
    # Other steps came first, which work.messages may not have: measured again next claim.
    work.chars_exact = False
    work.state.pop(CHARS, None)
    with transaction.atomic():
        work.run = locked(work)
        step = work.run.append_step(kind, data, update=update, **columns)
        if kind == Step.Kind.LLM:
            # Its calls were planned as the step after the head we knew (gated or not);
            # another step came first.
            for item in work.state["pending"]:
                item["llm_seq"] = step.seq
        for then_kind, then_data, then_columns in then:
            work.run.append_step(then_kind, then_data, **then_columns)
        if checkpoint:
            write_checkpoint(work)
        for other in also:
            sql.update(*other)
    return step


# The checkpoint state's key for the conversation's length: [run id, seq of the last step it
# counts, length]. A claim would otherwise serialise the whole conversation just to measure it.
CHARS = "conversation_chars"


def _carry_chars(work: Work, last_seq: int) -> None:
    if work.chars_exact and "pii" not in work.agent_config:
        # Not with a PII policy: work.messages has the raw values, the timeline masked ones.
        work.state[CHARS] = [str(work.run.pk), last_seq, work.messages_chars]
    else:
        work.state.pop(CHARS, None)


def carried_chars(state: dict, run_id: Any, last_seq: int | None) -> int | None:
    """The conversation's length from the checkpoint, if it counts exactly the conversation
    steps there are (the last one is the one it counted up to; a fork's copied state or a
    step written since does not match), else None."""
    carried = state.get(CHARS)
    if carried and carried[0] == str(run_id) and carried[1] == last_seq:
        return carried[2]
    return None


def locked(work: Work) -> Run:
    """The run under a row lock, if this worker still owns it and it is still running.

    An operator's cancel (or a sweep takeover) moves the run away from us; we stop then.
    """
    run = Run.locked(work.run.pk)
    if run.lease_owner != work.worker or run.status != Run.Status.RUNNING:
        work.run = run
        raise Stop
    return run


def write_checkpoint(work: Work) -> None:
    """The engine state at the run's head, inside a transaction that wrote steps.

    One INSERT .. ON CONFLICT DO UPDATE: update_or_create would cost a SELECT, an INSERT
    and two savepoints (bench/engine_throughput.py). The hot path writes the checkpoint with
    its step (append); this is for the transactions that open approvals.
    """
    sql.insert(
        Checkpoint(
            run=work.run,
            seq=work.run.last_seq,
            state=work.state,
            run_created=work.run.created_at,
        ),
        CHECKPOINT_COLUMNS,
        conflict=checkpoint_conflict(),
        update_names=("state",),
    )


def charge_discarded(work: Work, response: Any) -> None:
    """The run was cancelled (or taken over) while the model answered: the answer is not
    used, but it was paid for, so the run's spend says so (no step: the run is not ours)."""
    log.info("run %s: discarding a %s USD response", work.run.pk, response.cost_usd)
    Run.objects.filter(pk=work.run.pk).update(
        cost_usd=F("cost_usd") + response.cost_usd,
        # Cache writes and reads included, as for a recorded answer (Usage.total_input_tokens).
        tokens_in=F("tokens_in") + response.usage.total_input_tokens,
        tokens_out=F("tokens_out") + response.usage.output_tokens,
    )
