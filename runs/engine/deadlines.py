"""Tool deadlines, enforced: a call runs on a pool thread, and the engine waits for it until
its deadline (tool.timeout_seconds, plus a little grace for a tool that honours
ctx.deadline to say so itself). Past it the call is abandoned, since Python cannot stop a
thread: the engine goes on with a timeout (ToolTimeout, an infrastructure error: tool_calls.py
retries it as the tool's policy allows, or the ledger asks a person whether the effect
happened), and whatever the abandoned call returns later is dropped unread.
Why and how: docs/design/modules.md."""

import contextvars
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from django.db import connection, connections

from agentkit.tools import Tool, ToolContext, ToolInfraError

# A tool that watches ctx.deadline (run_query's progress handler) gets this long past it to
# report its own error before the engine gives up on it.
GRACE_SECONDS = 0.25
# Calls running at once in one worker process, abandoned ones included; a call that finds
# them all busy waits, and times out if none frees up before its deadline.
POOL_THREADS = 32

log = logging.getLogger("agentops.engine")


class ToolTimeout(ToolInfraError):
    """The call did not return by its deadline and was abandoned."""


def call(tool: Tool, args: dict, ctx: ToolContext) -> Any:
    """The tool's result, or ToolTimeout once its deadline (and the grace) has passed."""
    if tool.inline:
        try:
            return tool.call(args, ctx)
        finally:
            if time.monotonic() > ctx.deadline:
                log.warning(
                    "inline tool %s overran its %gs deadline: it must not be inline",
                    tool.name,
                    tool.timeout_seconds,
                )
    if connection.in_atomic_block:
        return tool.call(args, ctx)
    future = _pool.submit(contextvars.copy_context().run, _call_and_disconnect, tool, args, ctx)
    try:
        return future.result(timeout=max(0.0, ctx.deadline - time.monotonic()) + GRACE_SECONDS)
    except FutureTimeout:
        started = not future.cancel()  # not started yet: it never will
        what = "timed out" if started else "could not start (every tool thread busy)"
        raise ToolTimeout(f"{tool.name} {what} after {tool.timeout_seconds:g}s") from None


def _call_and_disconnect(tool: Tool, args: dict, ctx: ToolContext) -> Any:
    try:
        return tool.call(args, ctx)
    finally:
        # Not kept between calls: an abandoned call must not hold a connection (or a
        # transaction) for the thread's life, and a test's database must be droppable.
        for conn in connections.all(initialized_only=True):
            conn.close()


class DaemonPool:
    """Reusable daemon threads (concurrent.futures' are joined at exit: a hung tool would
    keep the worker from stopping). A thread starts only when a job finds none idle, so a
    pool made at import costs nothing: a module that hands work off keeps one at its top,
    `_pool = DaemonPool(size)`, one per process."""

    def __init__(self, size: int):
        self.size = size
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.threads = 0
        self.idle = 0
        self.queued = 0

    def submit(self, fn: Callable, *args: Any) -> Future:
        future: Future = Future()
        with self.lock:
            self.queued += 1
            if self.queued > self.idle and self.threads < self.size:
                self.threads += 1
                threading.Thread(
                    target=self._work, name=f"tool-{self.threads}", daemon=True
                ).start()
        self.jobs.put((future, fn, args))
        return future

    def _work(self) -> None:
        while True:
            with self.lock:
                self.idle += 1
            future, fn, args = self.jobs.get()
            with self.lock:
                self.idle -= 1
                self.queued -= 1
            if not future.set_running_or_notify_cancel():
                continue  # cancelled: its caller has given up on it
            try:
                result = fn(*args)
            except BaseException as exc:  # a worker's death in a test, a tool's bug: the caller's
                future.set_exception(exc)
            else:
                future.set_result(result)


_pool = DaemonPool(POOL_THREADS)
