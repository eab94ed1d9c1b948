"""Every reason a run stops, each decided by the terminator, not by the model or a crash."""

import time
from decimal import ROUND_UP, Decimal

import pytest
from django.db import transaction
from django.utils import timezone

from agentkit.llm import LLMError, LLMTransientError
from agentkit.llm.scripted import text, tool_use
from approvals.models import Approval
from runs import engine
from runs.engine import loop, owned, terminator
from runs.models import Checkpoint, Run, SideEffect, Step

from ..harness import CALLS, assert_timeline_sound, drive, forever, tool_steps

# Plain (rolled back) tests: these check decisions, not commits; the tests that need
# commits other connections can see (races, crashes, slices) are transactional.
pytestmark = pytest.mark.django_db


def terminated(run: Run) -> dict:
    step = run.steps.order_by("-seq").first()
    assert step.kind == Step.Kind.STATUS
    return step.data


def test_it_completes_when_the_model_stops_asking_for_tools(launch, script):
    provider = script([[text("Echoing."), tool_use("t_echo", text="hi")], [text("All done.")]])
    run = launch()
    assert drive(run) == [Run.Status.SUCCEEDED]
    assert run.termination_reason == Run.Termination.COMPLETED
    assert run.output == "All done."
    assert provider.calls == 2
    assert tool_steps(run)[0]["result"] == {"echo": "hi"}
    assert terminated(run)["reason"] == "completed"
    assert run.finished_at and not run.lease_owner
    assert_timeline_sound(run)


def test_it_stops_at_max_steps_without_another_model_call(launch, script):
    provider = script(forever(lambda i: [tool_use("t_echo", text=f"turn {i}")]))
    run = launch(max_steps=3)
    drive(run)
    assert run.status == Run.Status.FAILED
    assert run.termination_reason == Run.Termination.MAX_STEPS
    assert provider.calls == 3 and run.step_count == 3
    assert CALLS["t_echo"] == 3  # the tools of the last allowed turn still ran
    assert "3 of 3" in terminated(run)["detail"]


def test_max_cost_is_a_hard_stop_checked_before_the_call(launch, script):
    provider = script(forever(lambda i: [tool_use("t_echo", text=f"turn {i}")]))
    run = launch()
    first_estimate = terminator.estimate_next_cost(loop._load(run, "probe"))
    # Room for the first call at its worst case; after it, the next worst case cannot fit.
    budget = first_estimate.quantize(Decimal("0.0001"), rounding=ROUND_UP)
    Run.objects.filter(pk=run.pk).update(max_cost_usd=budget)
    drive(run)
    assert run.status == Run.Status.FAILED
    assert run.termination_reason == Run.Termination.MAX_COST
    assert provider.calls == run.step_count == 1
    assert 0 < run.cost_usd <= run.max_cost_usd
    assert "the next call could cost up to" in terminated(run)["detail"]


@pytest.mark.parametrize("budget", ["0.0005", "0.004", "0.01", "0.03", "0.08"])
def test_spend_never_exceeds_max_cost(launch, script, budget):
    # Growing conversations make every call dearer than the one before: the estimate must
    # still bound the next call, so the limit holds whatever the budget.
    script(forever(lambda i: [text("x" * 400 * i), tool_use("t_big", n=i, size=2000)]))
    run = launch(max_cost_usd=budget, max_steps=200)
    drive(run)
    assert run.termination_reason == Run.Termination.MAX_COST
    assert run.cost_usd <= Decimal(budget)
    spent = sum(run.steps.values_list("cost_usd", flat=True), Decimal(0))
    assert spent == run.cost_usd


def test_a_call_that_would_exceed_the_budget_is_never_made(launch, script):
    provider = script([[text("Hello.")]])
    run = launch(max_cost_usd="0.0001")  # below max_tokens of output alone
    drive(run)
    assert provider.calls == 0
    assert run.termination_reason == Run.Termination.MAX_COST
    assert run.cost_usd == 0


def test_it_stops_at_max_seconds_before_the_next_tool(launch, script):
    provider = script(
        [[tool_use("t_age_run", seconds=120), tool_use("t_echo", text="late")], [text("done")]]
    )
    run = launch(max_seconds=60)
    drive(run)
    assert run.status == Run.Status.FAILED
    assert run.termination_reason == Run.Termination.MAX_SECONDS
    assert CALLS["t_age_run"] == 1 and CALLS["t_echo"] == 0
    assert provider.calls == 1


def test_time_waiting_for_a_person_does_not_count_against_max_seconds(
    launch, script, no_enqueue, plain_user
):
    provider = script([[tool_use("t_gated", n=1)], [text("done")]])
    run = launch(max_seconds=3)
    assert drive(run) == [Run.Status.WAITING]
    time.sleep(3.2)  # the approver takes longer than the run may work
    approval = Approval.objects.get(run=run)
    with transaction.atomic():
        locked = Run.locked(run.pk)
        Approval.objects.filter(pk=approval.pk).update(
            status=Approval.Status.APPROVED, decided_at=timezone.now(), decided_by=plain_user
        )
        assert locked.resume("all decisions made")
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED, run.status_detail
    assert CALLS["t_gated"] == 1 and provider.calls == 2
    assert run.elapsed_seconds > 3  # wall time still says how long it really took
    assert 3 < run.waiting_seconds < run.elapsed_seconds


def decide(run: Run, user, **decision) -> None:
    """What the approvals decision service does, under the run's row lock."""
    with transaction.atomic():
        locked = Run.locked(run.pk)
        Approval.objects.filter(run=run, status=Approval.Status.PENDING).update(
            decided_at=timezone.now(), decided_by=user, **decision
        )
        assert locked.resume("all decisions made")


def test_a_rejected_call_goes_back_to_the_agent_as_an_error(launch, script, plain_user):
    provider = script([[tool_use("t_gated", n=1)], [text("understood")]])
    run = launch()
    drive(run)
    decide(run, plain_user, status=Approval.Status.REJECTED, reason="too risky")
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED
    [step] = tool_steps(run, "t_gated")
    assert step["is_error"] and step["error"] == "rejected by olivia: too risky"
    assert CALLS["t_gated"] == 0 and provider.calls == 2
    assert run.consecutive_errors == 0  # a person's no is not the agent's error


def test_an_expired_approval_fails_the_run_when_the_policy_says_so(launch, script, plain_user):
    script([[tool_use("t_gated", n=1)], [text("never")]])
    run = launch()
    drive(run)
    Approval.objects.filter(run=run).update(on_expiry="fail")
    decide(run, None, status=Approval.Status.EXPIRED)
    drive(run)
    assert run.status == Run.Status.FAILED
    assert run.termination_reason == Run.Termination.APPROVAL_EXPIRED
    assert CALLS["t_gated"] == 0


def test_it_stops_after_too_many_consecutive_errors(launch, script):
    calls = [
        [tool_use("t_fail", n=1)],
        [tool_use("t_fail", n=2)],
        [tool_use("t_echo", text="recovered")],  # a success resets the streak
        [tool_use("t_fail", n=3)],
        [tool_use("t_fail", n=4)],
        [tool_use("t_fail", n=5)],
        [text("never reached")],
    ]
    provider = script(calls)
    run = launch(max_consecutive_errors=3)
    drive(run)
    assert run.termination_reason == Run.Termination.CONSECUTIVE_ERRORS
    assert provider.calls == 6
    assert run.consecutive_errors == 3 and run.error_count == 5
    assert CALLS["t_fail"] == 5


def test_invalid_arguments_and_unknown_tools_are_errors_the_model_sees(launch, script):
    provider = script(
        [
            [tool_use("t_echo", text=123, extra="nope")],
            [tool_use("rm_rf", path="/")],
            [text("ok")],
        ]
    )
    run = launch(max_consecutive_errors=5)
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED
    first, second = tool_steps(run)
    assert first["is_error"] and "invalid arguments for t_echo" in first["error"]
    assert second["is_error"] and "unknown tool 'rm_rf'" in second["error"]
    assert CALLS["t_echo"] == 0
    # The model got both errors back as tool results, paired with its tool_use ids.
    last_request = provider.requests[-1].messages
    results = [b for m in last_request if m["role"] == "user" for b in m["content"] if "type" in b]
    assert [b["is_error"] for b in results] == [True, True]


def test_it_detects_no_progress_when_the_same_call_repeats(launch, script):
    provider = script(forever(lambda i: [tool_use("t_echo", text="same")]))
    run = launch()
    drive(run)
    assert run.status == Run.Status.FAILED
    assert run.termination_reason == Run.Termination.NO_PROGRESS
    assert provider.calls == terminator.NO_PROGRESS_REPEATS
    # The repeated call is refused before it runs.
    assert CALLS["t_echo"] == terminator.NO_PROGRESS_REPEATS - 1
    assert "t_echo was called 3 times" in terminated(run)["detail"]


def test_same_tool_with_different_arguments_is_progress(launch, script):
    script([[tool_use("t_echo", text=f"page {i}")] for i in range(5)] + [[text("read")]])
    run = launch()
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED
    assert CALLS["t_echo"] == 5


def test_repeats_count_within_the_recent_calls_only(launch, script, monkeypatch):
    monkeypatch.setattr(terminator, "NO_PROGRESS_WINDOW", 4)
    same = tool_use("t_echo", text="same")
    others = lambda tag: [[tool_use("t_echo", text=f"{tag}{i}")] for i in range(3)]  # noqa: E731
    # "same" three times, but never three times among four consecutive calls.
    script([[same], *others("a"), [same], *others("b"), [same], [text("done")]])
    run = launch()
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED
    assert CALLS["t_echo"] == 9
    # The state carries the window, not every call the run made.
    assert len(Checkpoint.objects.filter(run=run).latest("seq").state["recent_calls"]) == 4


def test_no_progress_leaves_no_pending_approval_behind(launch, script):
    same = tool_use("t_echo", text="same")
    script([[same], [same], [tool_use("t_gated", n=1), same]])
    run = launch()
    drive(run)
    assert run.termination_reason == Run.Termination.NO_PROGRESS
    assert not Approval.objects.filter(run=run).exists()


def test_cancel_while_running_stops_at_the_next_step_boundary(launch, script, monkeypatch):
    # A call that takes longer than the recheck window (any real one) is followed by a read.
    monkeypatch.setattr(owned, "RECHECK_AFTER_SECONDS", 0)
    provider = script(forever(lambda i: [tool_use("t_cancel_run"), tool_use("t_echo", text="x")]))
    run = launch()
    assert drive(run) == [Run.Status.CANCELLED]
    assert run.termination_reason == Run.Termination.CANCELLED
    assert provider.calls == 1  # no model call after the cancel
    assert CALLS["t_cancel_run"] == 1 and CALLS["t_echo"] == 0
    last = run.steps.order_by("-seq").first()
    assert last.data["event"] == "cancelled" and last.data["from"] == Run.Status.RUNNING
    assert not run.lease_owner and run.finished_at
    assert_timeline_sound(run)


def test_a_cancel_within_the_recheck_window_runs_no_call_with_side_effects(launch, script):
    # Within the window after the worker's last read or write, a call without side effects
    # may still run; the turn is discarded when it is recorded, the call with side effects
    # after them never runs.
    provider = script(
        forever(
            lambda i: [
                tool_use("t_cancel_run"),
                tool_use("t_echo", text="x"),
                tool_use("t_charge", amount=1),
            ]
        )
    )
    run = launch()
    assert drive(run) == [Run.Status.CANCELLED]
    assert provider.calls == 1
    assert CALLS["t_charge"] == 0 and not SideEffect.objects.filter(run=run).exists()
    assert not run.steps.filter(kind__in=[Step.Kind.LLM, Step.Kind.TOOL]).exists()
    assert run.cost_usd > 0  # the discarded answer was paid for
    assert_timeline_sound(run)


def test_a_call_with_side_effects_reads_first_even_within_the_window(launch, script, monkeypatch):
    # The cancel lands just after the model step that asked for it was written.
    real = owned.append

    def record_then_cancel(work, kind, *args, **kwargs):
        step = real(work, kind, *args, **kwargs)
        if kind == Step.Kind.LLM:
            Run.objects.get(pk=work.run.pk).cancel(reason="operator clicked cancel")
        return step

    monkeypatch.setattr(owned, "append", record_then_cancel)
    script(forever(lambda i: [tool_use("t_charge", amount=1)]))
    run = launch()
    assert drive(run) == [Run.Status.CANCELLED]
    assert CALLS["t_charge"] == 0 and not SideEffect.objects.filter(run=run).exists()
    assert run.steps.filter(kind=Step.Kind.LLM).count() == 1
    assert_timeline_sound(run)


def _cancel_after_each_tool_record(monkeypatch):
    """An operator cancels right after each write that records a tool result (a tool step
    of its own, or the ones written with the model step that asked for them)."""
    real = owned.append

    def record_then_cancel(work, kind, *args, then=(), **kwargs):
        step = real(work, kind, *args, then=then, **kwargs)
        if Step.Kind.TOOL in (kind, *(t[0] for t in then)):
            Run.objects.get(pk=work.run.pk).cancel(reason="operator clicked cancel")
        return step

    monkeypatch.setattr(owned, "append", record_then_cancel)


def test_cancel_between_steps_is_seen_before_the_next_model_call(launch, script, monkeypatch):
    # Once the worker's last confirmation of ownership is older than the recheck window
    # (always, at human pace), the next model call is preceded by a read.
    monkeypatch.setattr(owned, "RECHECK_AFTER_SECONDS", 0)
    _cancel_after_each_tool_record(monkeypatch)
    provider = script(forever(lambda i: [tool_use("t_echo", text=f"{i}")]))
    run = launch()
    assert drive(run) == [Run.Status.CANCELLED]
    assert provider.calls == 1  # the second call was never paid for
    assert CALLS["t_echo"] == 1


def test_cancel_right_after_a_recorded_step_costs_one_discarded_call(launch, script, monkeypatch):
    # Within the window (the step was recorded a moment ago) the call goes out without a
    # read; the cancel is seen when its answer is recorded: charged and discarded, with
    # what its call without side effects returned.
    _cancel_after_each_tool_record(monkeypatch)
    provider = script(forever(lambda i: [tool_use("t_echo", text=f"{i}")]))
    run = launch()
    assert drive(run) == [Run.Status.CANCELLED]
    assert provider.calls == 2
    # Its call without side effects ran (nothing read within the window), not recorded.
    assert CALLS["t_echo"] == 2 and len(tool_steps(run)) == 1
    run.refresh_from_db()
    assert run.step_count == 1  # the discarded answer is no step of the run...
    assert run.cost_usd > run.steps.get(kind="llm").cost_usd  # ...but was paid for
    assert_timeline_sound(run)


def test_cancel_during_a_model_call_runs_none_of_its_tools(launch, script, monkeypatch):
    # A real model call takes longer than the recheck window: its calls are preceded by a read.
    monkeypatch.setattr(owned, "RECHECK_AFTER_SECONDS", 0)

    def cancel_now(request):
        Run.objects.get(pk=request.metadata["run_id"]).cancel(reason="stop")

    provider = script(forever(lambda i: [tool_use("t_echo", text=f"{i}")]), on_call=cancel_now)
    run = launch()
    drive(run)
    assert run.status == Run.Status.CANCELLED
    assert provider.calls == 1 and CALLS["t_echo"] == 0
    assert not run.steps.filter(kind=Step.Kind.LLM).exists()
    # The answer was thrown away, but it was paid for: the run's spend includes it.
    assert run.cost_usd > 0 and run.tokens_in > 0 and run.tokens_out > 0


def test_cancel_while_waiting_frees_the_run_and_nothing_runs(launch, script):
    provider = script([[tool_use("t_gated", n=1)], [text("done")]])
    run = launch()
    assert drive(run) == [Run.Status.WAITING]
    assert Approval.objects.filter(run=run, status=Approval.Status.PENDING).count() == 1
    assert run.cancel(reason="not needed any more")
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert run.termination_reason == Run.Termination.CANCELLED
    # A stale queue message for it does nothing.
    assert engine.advance(run.pk) == "busy"
    assert CALLS["t_gated"] == 0 and provider.calls == 1
    assert not run.cancel()  # already finished
    assert_timeline_sound(run)


def test_cancel_while_queued(launch, script):
    provider = script([[text("done")]])
    run = launch()
    assert run.cancel()
    assert engine.advance(run.pk) == "busy"
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED and provider.calls == 0


def test_a_model_error_that_is_not_transient_fails_the_run_at_once(launch, script):
    provider = script([[text("never")]], errors=[LLMError("invalid request", status=400)])
    run = launch()
    drive(run)
    assert run.status == Run.Status.FAILED
    assert run.termination_reason == Run.Termination.LLM_ERROR
    assert provider.calls == 1
    error = run.steps.get(kind=Step.Kind.LLM_ERROR).data
    assert error["status"] == 400 and not error["will_retry"]


def test_transient_model_errors_are_retried_then_fail_with_llm_error(launch, script, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "LLM_MAX_RETRIES": 2}
    overloaded = LLMTransientError("overloaded", status=529)
    provider = script([[text("never")]], errors=[overloaded] * 10)
    run = launch()
    drive(run)
    assert run.termination_reason == Run.Termination.LLM_ERROR
    assert provider.calls == 3  # one call and two retries
    steps = [s.data for s in run.steps.filter(kind=Step.Kind.LLM_ERROR)]
    assert [s["will_retry"] for s in steps] == [True, True, False]
    assert run.retry_count == 3


def test_a_transient_model_error_then_success_continues(launch, script):
    provider = script(
        [[tool_use("t_echo", text="a")], [text("done")]],
        errors=[LLMTransientError("rate limited", status=429, retry_after=0.01)],
    )
    run = launch()
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED
    assert provider.calls == 3
    assert run.steps.filter(kind=Step.Kind.LLM).count() == 2


def test_a_run_retries_the_model_no_more_than_its_run_cap(launch, script, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "LLM_MAX_RETRIES": 5, "RUN_MAX_RETRIES": 3}
    provider = script([[text("never")]], errors=[LLMTransientError("500", status=500)] * 10)
    run = launch()
    drive(run)
    assert run.termination_reason == Run.Termination.LLM_ERROR
    assert provider.calls == 4  # retries stop when the run's budget is spent
