"""Test-only agents, tools and model providers for the engine tests (never in the product).

Imported by tests/runs/conftest.py and by the worker subprocess of the crash tests
(tests/runs/worker_process.py), so both processes know the same agent and tools.
"""

import copy
import dataclasses
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import timedelta
from decimal import Decimal

from django import forms
from django.db import connection, transaction
from django.utils import timezone

from agentkit.agents import CATALOGUE, Agent, GateRules, Limits, register
from agentkit.llm import LLMRequest, LLMResponse
from agentkit.llm.scripted import ScriptedProvider, Turn, text, tool_use
from agentkit.tools import (
    REGISTRY,
    Blast,
    Pending,
    RetryPolicy,
    ToolContext,
    ToolError,
    ToolInfraError,
    tool,
)
from runs import engine
from runs.models import Run

AGENT = "engine-test"

# How often each test tool actually ran (the engine's own records are what we check against).
CALLS: Counter = Counter()
_calls_lock = threading.Lock()
# Infrastructure failures still to come, per tool name (t_flaky reads it).
FAILURES_LEFT: Counter = Counter()

FAST_RETRY = RetryPolicy(max_attempts=3, base_seconds=0.001, max_seconds=0.002)


def _count(name: str) -> int:
    with _calls_lock:
        CALLS[name] += 1
        return CALLS[name]


@tool(reversible=True, blast=Blast.NONE, name="t_echo")
def t_echo(text: str) -> dict:
    """Echo the text back."""
    _count("t_echo")
    return {"echo": text}


# The thread each t_inline call ran on.
INLINE_THREADS: list[int] = []


@tool(reversible=True, blast=Blast.NONE, name="t_inline", inline=True)
def t_inline(text: str) -> dict:
    """Upper-case the text (instant, in memory: called on the worker's own thread)."""
    INLINE_THREADS.append(threading.get_ident())
    return {"upper": text.upper()}


@tool(reversible=True, blast=Blast.NONE, name="t_fail")
def t_fail(n: int) -> dict:
    """Always refuses (a business error)."""
    _count("t_fail")
    raise ToolError(f"refused #{n}")


@tool(reversible=True, blast=Blast.NONE, name="t_flaky", retry=FAST_RETRY)
def t_flaky(n: int) -> dict:
    """Fails with an infrastructure error while FAILURES_LEFT["t_flaky"] > 0."""
    _count("t_flaky")
    with _calls_lock:
        if FAILURES_LEFT["t_flaky"] > 0:
            FAILURES_LEFT["t_flaky"] -= 1
            raise ToolInfraError("upstream timed out")
    return {"ok": n}


@tool(reversible=True, blast=Blast.NONE, name="t_down", retry=FAST_RETRY)
def t_down(n: int) -> dict:
    """An upstream that is down: every call is an infrastructure error."""
    _count("t_down")
    raise ToolInfraError("connection refused")


# t_sleep's calls as they ran: (n, started, ended, thread), and how many ran at once.
SLEPT: list[tuple[int, float, float, int]] = []
SLEEPING = {"now": 0, "most": 0}


@tool(reversible=True, blast=Blast.NONE, name="t_sleep")
def t_sleep(seconds: float, n: int = 0) -> dict:
    """A read-only lookup that takes `seconds` (a slow upstream; a run slow enough to be
    steered while it works)."""
    _count("t_sleep")
    with _calls_lock:
        SLEEPING["now"] += 1
        SLEEPING["most"] = max(SLEEPING["most"], SLEEPING["now"])
    started = time.monotonic()
    time.sleep(seconds)
    with _calls_lock:
        SLEEPING["now"] -= 1
        SLEPT.append((n, started, time.monotonic(), threading.get_ident()))
    return {"n": n}


class Clock:
    """django.utils.timezone.now, `skew` ahead (tests/runs/conftest.py installs it)."""

    def __init__(self):
        self.real_now = timezone.now
        self.skew = timedelta(0)

    def now(self):
        return self.real_now() + self.skew


CLOCK = Clock()


@tool(reversible=True, blast=Blast.NONE, name="t_age_run")
def t_age_run(seconds: int, ctx: ToolContext = None) -> dict:
    """A long tool call: the clock moves `seconds` ahead while it runs."""
    _count("t_age_run")
    CLOCK.skew += timedelta(seconds=seconds)
    return {"aged": seconds}


@tool(reversible=True, blast=Blast.NONE, name="t_cancel_run")
def t_cancel_run(ctx: ToolContext = None) -> dict:
    """An operator clicks cancel while this tool runs."""
    from runs.models import Run

    _count("t_cancel_run")
    Run.objects.get(pk=ctx.run_id).cancel(reason="operator clicked cancel")
    return {"done": True}


@tool(reversible=True, blast=Blast.NONE, name="t_big")
def t_big(n: int, size: int) -> str:
    """A large tool result (for the context budget)."""
    _count("t_big")
    return f"{n}:" + "x" * size


@tool(reversible=False, blast=Blast.HIGH, name="t_gated")
def t_gated(n: int) -> dict:
    """Irreversible and always gated for the test agent."""
    _count("t_gated")
    return {"done": n}


@tool(reversible=False, blast=Blast.LOW, accepts_idempotency_key=True, name="t_charge")
def t_charge(amount: int, ctx: ToolContext = None) -> dict:
    """An irreversible, low-risk effect (not gated) that honours idempotency keys."""
    _count("t_charge")
    return {"charged": amount, "key": ctx.idempotency_key}


@tool(reversible=False, blast=Blast.LOW, name="t_notify", retry=FAST_RETRY)
def t_notify(to: str) -> dict:
    """An irreversible effect (not gated) that cannot de-duplicate retries; fails with an
    infrastructure error while FAILURES_LEFT["t_notify"] > 0."""
    _count("t_notify")
    with _calls_lock:
        if FAILURES_LEFT["t_notify"] > 0:
            FAILURES_LEFT["t_notify"] -= 1
            raise ToolInfraError("read timed out")
    return {"notified": to}


@tool(reversible=False, blast=Blast.LOW, accepts_idempotency_key=True, name="t_start")
def t_start(job: str, escalate: bool = False, ctx: ToolContext = None) -> Pending:
    """Start a job that finishes later; completion by callback."""
    _count("t_start")
    return Pending(
        awaits=f"job {job}",
        deadline=timedelta(minutes=5),
        result={"job": job, "callback": ctx.callback_url},
        on_timeout="person" if escalate else "agent",
    )


# Polls left before t_export_status says the export is ready.
EXPORT_POLLS: Counter = Counter()


@tool(reversible=False, blast=Blast.LOW, accepts_idempotency_key=True, name="t_export")
def t_export(table: str) -> Pending:
    """Start an export; done when t_export_status says so."""
    _count("t_export")
    return Pending(
        awaits=f"the export of {table}",
        deadline=timedelta(minutes=10),
        completion="poll",
        poll=("t_export_status", {"table": table}),
        poll_every=timedelta(seconds=30),
    )


@tool(reversible=True, blast=Blast.NONE, name="t_export_status")
def t_export_status(table: str) -> Pending | dict:
    """How the export of a table is going."""
    _count("t_export_status")
    with _calls_lock:
        if EXPORT_POLLS[table] > 0:
            EXPORT_POLLS[table] -= 1
            return Pending(awaits="", deadline=timedelta(0))
    return {"file": f"{table}.csv", "rows": 42}


# Calls still to hang, per tool (the t_hang* tools), until RELEASE is set; what each call
# was given and when it came back, for the deadline tests.
HANG_LEFT: Counter = Counter()
RELEASE = threading.Event()
HUNG: list[dict] = []
HANG_TIMEOUT = 0.3


def _maybe_hang(name: str, key: str = "") -> bool:
    _count(name)
    with _calls_lock:
        hang = HANG_LEFT[name] > 0
        if hang:
            HANG_LEFT[name] -= 1
    if hang:
        call = {"tool": name, "key": key, "returned": threading.Event()}
        HUNG.append(call)
        RELEASE.wait(timeout=30)
        call["returned"].set()
    return hang


@tool(
    reversible=True, blast=Blast.NONE, name="t_hang", timeout_seconds=HANG_TIMEOUT, retry=FAST_RETRY
)
def t_hang(n: int) -> dict:
    """A read-only lookup that hangs while HANG_LEFT["t_hang"] > 0."""
    late = _maybe_hang("t_hang")
    return {"n": n, "late": late}


@tool(
    reversible=False,
    blast=Blast.LOW,
    name="t_hang_notify",
    timeout_seconds=HANG_TIMEOUT,
    retry=FAST_RETRY,
)
def t_hang_notify(to: str) -> dict:
    """An effect that cannot de-duplicate retries; hangs while HANG_LEFT says so."""
    late = _maybe_hang("t_hang_notify")
    return {"notified": to, "late": late}


@tool(
    reversible=False,
    blast=Blast.LOW,
    accepts_idempotency_key=True,
    name="t_hang_charge",
    timeout_seconds=HANG_TIMEOUT,
    retry=FAST_RETRY,
)
def t_hang_charge(amount: int, ctx: ToolContext = None) -> dict:
    """An effect that honours idempotency keys; hangs while HANG_LEFT says so."""
    HUNG_KEYS.append(ctx.idempotency_key)
    late = _maybe_hang("t_hang_charge", ctx.idempotency_key)
    return {"charged": amount, "key": ctx.idempotency_key, "late": late}


HUNG_KEYS: list[str] = []


TEST_TOOLS = (
    "t_hang",
    "t_hang_notify",
    "t_hang_charge",
    "t_start",
    "t_export",
    "t_export_status",
    "t_notify",
    "t_charge",
    "t_echo",
    "t_sleep",
    "t_inline",
    "t_fail",
    "t_flaky",
    "t_down",
    "t_age_run",
    "t_cancel_run",
    "t_big",
    "t_gated",
    "lookup_order",
    "issue_refund",
    "send_customer_email",
)


class EngineTestInput(forms.Form):
    task = forms.CharField(max_length=200)
    script = forms.CharField(max_length=50, required=False)


# Named scripts, so a worker subprocess replays the same turns as the test that launched it.
def refund_then_email() -> list[Turn]:
    return [
        [text("Refunding."), tool_use("issue_refund", order_id=7, amount="10.00", reason="test")],
        [
            tool_use(
                "send_customer_email",
                to="customer@example.com",
                subject="Refund",
                body="We refunded 10.00.",
            )
        ],
        [text("Refunded and told the customer.")],
    ]


def email_only() -> list[Turn]:
    return [
        [tool_use("send_customer_email", to="c@example.com", subject="Hi", body="Hello")],
        [text("Mailed.")],
    ]


def slow_steps() -> list[Turn]:
    """Fifteen slow calls (4.5 s in all), then an answer: time for an operator to steer it."""
    return [[tool_use("t_sleep", seconds=0.3 + i / 1000)] for i in range(15)] + [[text("Slept.")]]


SCRIPTS: dict[str, Callable[[], list[Turn]]] = {
    "refund_then_email": refund_then_email,
    "email_only": email_only,
    "slow_steps": slow_steps,
}


def _script(data: dict) -> list[Turn]:
    return SCRIPTS[data["script"]]() if data.get("script") else [[text("Nothing to do.")]]


def register_agent() -> Agent:
    return register(
        Agent(
            slug=AGENT,
            title="Engine test agent",
            description="Test-only.",
            model="claude-sonnet-4-6",
            system_prompt="You are a test agent.",
            tools=TEST_TOOLS,
            input_form=EngineTestInput,
            prompt=lambda d: d["task"],
            script=_script,
            limits=Limits(
                max_steps=20,
                max_cost_usd=Decimal("5.00"),
                max_seconds=600,
                max_consecutive_errors=3,
            ),
            gates=GateRules(
                always_gate=("t_gated",),
                never_gate=("issue_refund", "send_customer_email"),
            ),
        )
    )


def die_after(tool_name: str, die: Callable[[], None]) -> Callable[[], None]:
    """Fault injection through the tool registry (the engine has no hook for it): the tool
    runs for real, then `die` is called before the engine can record what it did, once.
    Returns what puts the real tool back."""
    real = REGISTRY[tool_name]

    def dying(**kwargs):
        result = real.fn(**kwargs)
        REGISTRY[tool_name] = real
        die()
        return result

    REGISTRY[tool_name] = dataclasses.replace(real, fn=dying)
    return lambda: REGISTRY.__setitem__(tool_name, real)


def kill_process_after(tool_name: str | None) -> None:
    """In a worker subprocess of the crash tests: SIGKILL this process right after the
    tool's effect, between the effect and its record (the worst moment)."""
    if tool_name:
        die_after(tool_name, lambda: os.kill(os.getpid(), signal.SIGKILL))


def unregister_agent() -> None:
    CATALOGUE.pop(AGENT, None)


class Script:
    """A model provider for tests: scripted turns, optional errors, every request recorded.

    `errors[i]` (if given and not None) is raised by the i-th call instead of answering.
    """

    name = "scripted"

    def __init__(
        self,
        turns: Sequence[Turn] = (),
        *,
        errors: Sequence[Exception | None] = (),
        on_call: Callable[[LLMRequest], None] | None = None,
        latency: float = 0.0,
        verifier_turns: Sequence[Turn] = (),
        typing: float = 0.0,
    ):
        self.inner = ScriptedProvider(
            list(turns), latency=latency, verifier_turns=verifier_turns, typing=typing
        )
        self.errors = list(errors)
        self.on_call = on_call
        self.requests: list[LLMRequest] = []
        self._lock = threading.Lock()

    @property
    def calls(self) -> int:
        return len(self.requests)

    def complete(self, request: LLMRequest, *, on_text=None) -> LLMResponse:
        with self._lock:
            index = len(self.requests)
            # A copy: the engine keeps appending to the conversation list it passed in.
            self.requests.append(copy.deepcopy(request))
        if self.on_call:
            self.on_call(request)
        if index < len(self.errors) and self.errors[index] is not None:
            raise self.errors[index]
        return self.inner.complete(request, on_text=on_text)


def forever(make: Callable[[int], list[dict]]) -> list[Callable]:
    """Turns that never end the run: turn i is make(i) (enough for any test's limits)."""
    return [(lambda i: lambda _messages: make(i))(i) for i in range(200)]


# --- driving and checking runs ---------------------------------------------------------
def drive(run: Run, *, rounds: int = 100, time_slice: float = 30.0) -> list[str]:
    """Advance the run like a worker would until it stops being runnable; the results."""
    results = []
    for _ in range(rounds):
        result = engine.advance(run.pk, time_slice=time_slice)
        results.append(result)
        if result != "requeued":
            break
    run.refresh_from_db()
    return results


def tool_steps(run: Run, name: str | None = None) -> list[dict]:
    steps = [s.data for s in run.steps.filter(kind="tool").order_by("seq")]
    return [d for d in steps if name is None or d["tool"] == name]


def assert_timeline_sound(run: Run) -> None:
    seqs = list(run.steps.order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    assert run.verify_chain() == (True, None)
    assert run.last_seq == len(seqs)


def worker_thread(target: Callable[[], object], *, name: str, into: list) -> threading.Thread:
    """A thread that works like a worker thread: its result goes to `into`, and it hands its
    database connection back when done (or the test database cannot be dropped)."""
    from django.db import connections

    def run() -> None:
        try:
            into.append(target())
        except BaseException as exc:
            into.append(exc)
        finally:
            connections.close_all()

    return threading.Thread(target=run, name=name)


def tamper(sql: str, params: list) -> None:
    """Change rows behind the engine's back, as someone with database access would."""
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # Only a superuser can do this: it turns the append-only triggers off.
            cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(sql, params)
