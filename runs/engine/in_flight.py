"""Model calls in flight: a worker process waits on the model on one event loop, not in threads.
Why and how: docs/design/modules.md."""

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import Any, NoReturn, Protocol

from django.db import close_old_connections

from agentkit import llm, logs, metrics, tracing

from . import lease
from .owned import Stop, Work, cfg, release_connection

log = logging.getLogger("agentops.engine")

# How the model's answer is recorded (model.record_response, with what the request left out).
Record = Callable[[Work, llm.LLMResponse], None]


class Asking(Protocol):
    """One model call's attempts (model.Asking): the request, and what happens around each."""

    request: llm.LLMRequest

    def next_attempt(self) -> llm.LLMRequest: ...
    def failed(self, exc: llm.LLMError) -> float: ...
    def answered(self, response: llm.LLMResponse) -> llm.LLMResponse: ...


# How the run goes on after it: carry_on(first) works on the run from first(work) on
# (loop.work_on).
CarryOn = Callable[[Callable[[Work], None]], str]

# Threads that carry on after an answer: recording it is CPU and database work, which more
# threads than this would only queue on the interpreter's lock and the connection pool.
THREADS = 8
# How long a worker shutting down waits for its runs to be handed back.
RELEASE_SECONDS = 10.0


class _Call:
    """A run whose model call is in flight. `waiting` while the loop awaits the model (only
    then may release_all cancel it; a thread's part is left to finish)."""

    def __init__(self, work: Work, asking: Asking, record: Record, parent: Any):
        self.work, self.asking, self.record, self.parent = work, asking, record, parent
        self.waiting = False
        self.task: asyncio.Task | None = None


class _Loop:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.calls: dict[object, _Call] = {}
        self.closing = False

    def started(self) -> asyncio.AbstractEventLoop:
        # Under self.lock. Started by the first call, so a web process never has one.
        if self.loop is None:
            self.loop = asyncio.new_event_loop()
            self.pool = concurrent.futures.ThreadPoolExecutor(
                THREADS, thread_name_prefix="model-answers"
            )
            threading.Thread(target=self.loop.run_forever, name="model-calls", daemon=True).start()
        return self.loop


_loop = _Loop()


def takes(work: Work, asking: Asking, record: Record) -> bool:
    """The model call is to be awaited on the process's loop: True when it is (work.in_flight:
    the run's thread lets go of the run, then send() hands the call over), False when the
    call must wait in this thread."""
    if not (
        work.calls_in_flight
        and hasattr(work.provider, "acomplete")
        and not work.agent_config.get("stream_text")
    ):
        return False
    key = work.run.pk
    with _loop.lock:
        if _loop.closing or len(_loop.calls) >= cfg("MODEL_CALLS_IN_FLIGHT"):
            return False
        _loop.started()
        _loop.calls[key] = _Call(work, asking, record, tracing.current_context())
    metrics.model_calls_in_flight.inc()
    asking.next_attempt()  # the first: nothing to check yet, and the connection goes back
    work.in_flight = True
    return True


def send(work: Work, carry_on: CarryOn) -> None:
    """The call takes() kept, sent: the last thing the run's thread does with the run (the
    answer may be recorded by another thread at once). With the answer, another thread calls
    carry_on(first), where first(work) records it (loop.work_on)."""
    loop = _loop.loop
    assert loop is not None  # started by takes()
    asyncio.run_coroutine_threadsafe(_awaited(_loop.calls[work.run.pk], carry_on), loop)


def in_flight() -> int:
    """Calls this process has in flight now."""
    return len(_loop.calls)


async def _awaited(call: _Call, carry_on: CarryOn) -> None:
    call.task = asyncio.current_task()
    work, asking = call.work, call.asking
    try:
        while True:
            try:
                call.waiting = True
                response = await _attempt(work, asking.request, call.parent)
            except llm.LLMError as exc:
                call.waiting = False
                delay = await _in_thread(call, asking.failed, exc)
                if delay is None:
                    return  # the run has ended, or is no longer ours
                call.waiting = True
                await asyncio.sleep(delay)
                call.waiting = False
                if await _in_thread(call, asking.next_attempt) is None:
                    return
                continue
            except Exception as exc:
                # Not a model's answer nor its error (a provider's bug): a crash, as it would
                # be in a thread (lease.on_crash: retried later, capped).
                call.waiting = False
                await _in_thread(call, _reraise, exc)
                return
            call.waiting = False
            await _in_thread(call, _carry_on, call, carry_on, response)
            return
    except asyncio.CancelledError:
        # release_all: a worker shutting down, the model not answered yet.
        await _in_thread(call, lease.yield_slice, work)
    finally:
        metrics.model_calls_in_flight.dec()
        with _loop.lock:
            if _loop.calls.get(work.run.pk) is call:
                del _loop.calls[work.run.pk]


async def _attempt(work: Work, request: llm.LLMRequest, parent: Any) -> llm.LLMResponse:
    with tracing.model_call(work.provider.name, request, parent=parent) as span:
        try:
            response = await work.provider.acomplete(request)
        except llm.LLMError as exc:
            tracing.failed(span, type(exc).__name__, str(exc))
            raise
        tracing.model_answered(span, response)
        return response


async def _in_thread(call: _Call, func: Callable[..., Any], *args: Any) -> Any:
    """func(*args) in the pool, as the run's holder: None when it stopped (the run ended or
    was taken from us) or failed (recorded as a crash, as a worker's thread would)."""
    loop = asyncio.get_running_loop()
    # run_in_executor carries no context over (asyncio.to_thread would): the pool's thread
    # works as part of the step that asked, or its spans would each begin a trace.
    return await loop.run_in_executor(_loop.pool, _as_holder, call, func, args)


def _as_holder(call: _Call, func: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    work = call.work
    close_old_connections()
    try:
        with logs.bound(run_id=str(work.run.pk), seq=None), tracing.within(call.parent):
            try:
                return func(*args)
            except Stop:
                return None
            except Exception as exc:
                log.exception("run %s: unexpected error", work.run.pk)
                lease.on_crash(work.run.pk, work.worker, exc)
                return None
    finally:
        release_connection()


def _reraise(exc: Exception) -> NoReturn:
    raise exc


def _carry_on(call: _Call, carry_on: CarryOn, response: llm.LLMResponse) -> str:
    """The answer recorded, then the run's next steps for a time slice."""
    call.work.in_flight = False
    response = call.asking.answered(response)

    def record(work: Work) -> None:
        # The rest of the step that asked, in a span of its own: the answer recorded and the
        # calls without side effects it asked for made (their execute_tool spans), under the
        # run's span as every step is.
        run = work.run
        seq = run.last_seq + 1
        with tracing.step(run.traceparent, run_id=run.pk, agent=run.agent, seq=seq):
            call.record(work, response)

    return carry_on(record)


def reopen() -> None:
    """Take calls again (a worker started anew in this process, after release_all)."""
    with _loop.lock:
        _loop.closing = False


def release_all(timeout: float = RELEASE_SECONDS) -> int:
    """A worker shutting down: the calls still waiting on the model are cancelled and their
    runs handed back to the queue (another worker asks again). An answer being recorded is
    left to finish. Returns how many were handed back."""
    with _loop.lock:
        _loop.closing = True
        loop = _loop.loop
    if loop is None:
        return 0

    async def cancel() -> list[asyncio.Task]:
        cancelled = []
        for call in list(_loop.calls.values()):
            if call.waiting and call.task is not None:
                call.task.cancel()
                cancelled.append(call.task)
        return cancelled

    tasks = asyncio.run_coroutine_threadsafe(cancel(), loop).result(timeout)
    if tasks:

        async def handed_back() -> None:
            await asyncio.wait(tasks, timeout=timeout)

        asyncio.run_coroutine_threadsafe(handed_back(), loop).result(timeout + 1)
    return len(tasks)
