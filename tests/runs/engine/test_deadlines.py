"""Tool deadlines are enforced: a call that overruns is abandoned and recorded as timed out,
and the run goes on as the tool's retry policy and the ledger say.

Transactional: an enforced call runs on a pool thread with its own database connection,
which a test's open transaction would hide its writes from (deadlines.py)."""

import threading
import time

import pytest
from django.db import transaction

from agentkit.llm.scripted import text, tool_use
from agentkit.tools import Blast, get_tool, tool
from approvals.models import Approval
from runs.engine import deadlines
from runs.models import Run, SideEffect, Step

from ..harness import (
    CALLS,
    HANG_LEFT,
    HANG_TIMEOUT,
    HUNG,
    HUNG_KEYS,
    INLINE_THREADS,
    RELEASE,
    assert_timeline_sound,
    drive,
    tool_steps,
)

pytestmark = pytest.mark.django_db(transaction=True)

# What a timed-out attempt may take beyond its deadline: the grace, a thread hand-off.
MARGIN = deadlines.GRACE_SECONDS + 0.2


@pytest.fixture(autouse=True)
def _hanging_tools():
    HANG_LEFT.clear()
    HUNG.clear()
    HUNG_KEYS.clear()
    RELEASE.clear()
    yield
    RELEASE.set()  # let the abandoned calls return before the test's database goes
    for call in HUNG:
        call["returned"].wait(5)


def release_abandoned_calls() -> None:
    RELEASE.set()
    for call in HUNG:
        assert call["returned"].wait(5)
    time.sleep(0.1)  # what a late result could do, it would have done by now


def test_an_overrunning_lookup_is_abandoned_retried_and_fails_visibly(launch, script):
    HANG_LEFT["t_hang"] = 3  # every attempt its policy allows
    provider = script([[tool_use("t_hang", n=1)], [text("The lookup never answered.")]])
    run = launch()
    started = time.monotonic()
    drive(run)
    took = time.monotonic() - started
    assert run.termination_reason == Run.Termination.COMPLETED
    [step] = tool_steps(run, "t_hang")
    assert step["is_error"] and step["attempts"] == 3
    assert step["error"] == f"t_hang timed out after {HANG_TIMEOUT:g}s (after 3 attempts)"
    assert CALLS["t_hang"] == 3
    assert took < 3 * (HANG_TIMEOUT + MARGIN)
    # The model was told.
    result = provider.requests[-1].messages[-1]["content"][0]
    assert result["is_error"] and "timed out" in result["content"]
    assert run.tool_failed_count == 1 and run.retry_count == 2


def test_the_run_goes_on_within_the_deadline_and_a_late_result_is_ignored(launch, script):
    HANG_LEFT["t_hang"] = 1  # the first attempt hangs, the retry answers
    script([[tool_use("t_hang", n=7)], [text("done")]])
    run = launch()
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED
    [step] = tool_steps(run, "t_hang")
    assert step["result"] == {"n": 7, "late": False} and step["attempts"] == 2
    assert step["duration_ms"] < (HANG_TIMEOUT + MARGIN) * 1000
    steps_before = run.steps.count()
    # The abandoned call returns now, with its own result: nobody reads it.
    release_abandoned_calls()
    assert CALLS["t_hang"] == 2
    assert run.steps.count() == steps_before
    assert [d["result"] for d in tool_steps(run, "t_hang")] == [{"n": 7, "late": False}]
    assert_timeline_sound(run)


def test_an_overrunning_effect_without_keys_asks_whether_it_happened(launch, script):
    HANG_LEFT["t_hang_notify"] = 1
    script([[tool_use("t_hang_notify", to="ops")], [text("ok")]])
    run = launch()
    assert drive(run) == [Run.Status.WAITING]
    assert CALLS["t_hang_notify"] == 1  # never repeated blindly: it may have happened
    effect = SideEffect.objects.get(run=run)
    assert effect.status == SideEffect.Status.UNKNOWN
    approval = Approval.objects.get(run=run, status=Approval.Status.PENDING)
    assert approval.side_effect_id == effect.pk
    assert f"t_hang_notify timed out after {HANG_TIMEOUT:g}s" in approval.question
    release_abandoned_calls()
    # Its late success writes nothing: the person's answer decides.
    assert not run.steps.filter(kind=Step.Kind.TOOL).exists()
    assert SideEffect.objects.get(pk=effect.pk).status == SideEffect.Status.UNKNOWN


def test_an_overrunning_effect_with_keys_is_retried_with_the_same_key(launch, script):
    HANG_LEFT["t_hang_charge"] = 1
    script([[tool_use("t_hang_charge", amount=5)], [text("charged")]])
    run = launch()
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED
    [step] = tool_steps(run, "t_hang_charge")
    assert step["attempts"] == 2 and not step["is_error"]
    assert [step["idempotency_key"]] * 2 == HUNG_KEYS
    assert step["result"]["key"] == step["idempotency_key"]
    assert SideEffect.objects.get(run=run).status == SideEffect.Status.COMMITTED


def test_a_tool_that_uses_the_orm_commits_from_its_thread(launch, script):
    # t_cancel_run writes through the ORM on the tool thread; the engine sees it.
    script([[tool_use("t_cancel_run")], [text("never asked")]])
    run = launch()
    drive(run)
    assert run.status == Run.Status.CANCELLED
    assert CALLS["t_cancel_run"] == 1


def test_inside_a_transaction_the_call_stays_on_the_callers_thread():
    threads = []
    tool = get_tool("t_echo")
    real = tool.fn
    ctx = deadlines.ToolContext(run_id="r", idempotency_key="k", deadline=time.monotonic() + 1)
    try:
        object.__setattr__(tool, "fn", lambda text: threads.append(threading.get_ident()) or text)
        deadlines.call(tool, {"text": "a"}, ctx)
        with transaction.atomic():
            deadlines.call(tool, {"text": "b"}, ctx)
    finally:
        object.__setattr__(tool, "fn", real)
    assert threads[0] != threading.get_ident() and threads[1] == threading.get_ident()


def test_an_inline_tool_runs_on_the_workers_own_thread(launch, script):
    INLINE_THREADS.clear()
    provider = script(
        [[tool_use("t_inline", text="a")], [tool_use("t_echo", text="b")], [text("done")]]
    )
    run = launch()
    drive(run)  # advance, on this thread, outside any transaction (like a worker)
    assert run.termination_reason == Run.Termination.COMPLETED
    assert [threading.get_ident()] == INLINE_THREADS
    [step] = tool_steps(run, "t_inline")
    assert step["result"] == {"upper": "A"} and not step["is_error"]
    assert provider.requests[1].messages[-1]["content"][0]["content"] == '{"upper":"A"}'
    assert_timeline_sound(run)


def test_a_read_only_tool_with_a_deadline_still_times_out_next_to_inline_ones():
    HANG_LEFT["t_hang"] = 1
    tool_ = get_tool("t_hang")
    assert not tool_.inline
    ctx = deadlines.ToolContext(
        run_id="r", idempotency_key="k", deadline=time.monotonic() + HANG_TIMEOUT
    )
    started = time.monotonic()
    with pytest.raises(deadlines.ToolTimeout, match="t_hang timed out after"):
        deadlines.call(tool_, {"n": 1}, ctx)
    assert time.monotonic() - started < HANG_TIMEOUT + MARGIN


def test_only_a_tool_without_side_effects_can_be_inline():
    with pytest.raises(ValueError, match="only a tool without side effects runs inline"):
        tool(reversible=False, blast=Blast.LOW, name="t_never_registered", inline=True)(lambda n: n)
    assert get_tool("t_never_registered") is None
