"""Read-only calls of one model turn, run together.
Why and how: docs/design/modules.md."""

import contextvars
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from decimal import Decimal
from typing import Any

from django.db import connection, connections

from agentkit.tools import Tool

from .deadlines import DaemonPool
from .owned import Work, cfg

# Batches of all the runs a worker process steps at once: each batch holds at most its limit.
POOL_THREADS = 32
_pool = DaemonPool(POOL_THREADS)

# tool_calls.call_tool's (result, error, attempts, ms, cost)
Outcome = tuple[Any, str | None, int, int, Decimal]
Call = tuple[Tool, dict, str]  # the tool, its parsed arguments, the idempotency key


def limit_for(agent_config: dict) -> int:
    """How many read-only calls of one turn this run makes at once (1: one after another,
    as always inside a transaction)."""
    if connection.in_atomic_block:
        return 1
    declared = agent_config.get("max_parallel_tools")
    return max(1, int(declared if declared is not None else cfg("MAX_PARALLEL_TOOLS")))


def call_all(
    work: Work,
    calls: list[Call],
    call: Callable[[Work, Tool, dict, str], Outcome],
    *,
    limit: int,
) -> list[Outcome]:
    """Each call's outcome, in the order given; `call` makes one (tool_calls.call_tool)."""
    outcomes: list[Outcome | None] = [None] * len(calls)
    handed = (
        [i for i, (tool, _, _) in enumerate(calls) if not tool.inline]
        if limit > 1 and not connection.in_atomic_block
        else []
    )
    if len(handed) < 2:
        handed = []  # one call gains nothing from a thread switch
    futures: dict[Future, int] = {}
    waiting = list(handed)
    failure: BaseException | None = None

    def hand_on() -> None:
        while waiting and len(futures) < limit:
            i = waiting.pop(0)
            tool, args, key = calls[i]
            job = contextvars.copy_context().run
            futures[_pool.submit(job, _call_and_disconnect, call, work, tool, args, key)] = i

    hand_on()
    for i, (tool, args, key) in enumerate(calls):
        if i not in handed:
            outcomes[i] = call(work, tool, args, key)
    while futures:
        done, _ = wait(list(futures), return_when=FIRST_COMPLETED)
        for future in done:
            i = futures.pop(future)
            try:
                outcomes[i] = future.result()
            except Exception as exc:  # the engine's, not the tool's (call_tool keeps those)
                failure = failure or exc
        hand_on()
    if failure is not None:
        # As a call one after another would: nothing of the turn is written, and the run
        # resumes from its checkpoint. Raised once every call has come back.
        raise failure
    return outcomes  # type: ignore[return-value]


def _call_and_disconnect(
    call: Callable[[Work, Tool, dict, str], Outcome], work: Work, tool: Tool, args: dict, key: str
) -> Outcome:
    try:
        return call(work, tool, args, key)
    finally:
        # A pending operation's row is written from here: not held past the call.
        for conn in connections.all(initialized_only=True):
            conn.close()
