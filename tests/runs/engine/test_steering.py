"""Steering a live run in the engine: a pause taken at the next step boundary (the worker
freed), resume, instructions delivered once at the next model turn, and a failed call held
for an operator's choice (on_failure="ask"): retry (edited, gated again), skip, instruct."""

import dataclasses

import pytest

from agentkit.agents import register
from agentkit.llm import LLMError
from agentkit.llm.scripted import text, tool_use
from agentkit.tools import breaker
from approvals import decisions
from approvals.models import Approval
from runs import engine
from runs.engine import owned
from runs.models import Instruction, Recovery, Run, SideEffect, Step
from runs.steering import models as steering

from .. import harness
from ..harness import CALLS, FAILURES_LEFT, assert_timeline_sound, drive, tool_steps

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _read_every_boundary(monkeypatch):
    # The engine reads the run for steering at most once a RECHECK window; every boundary here.
    monkeypatch.setattr(owned, "RECHECK_AFTER_SECONDS", 0)


def _user_texts(request) -> list[str]:
    texts = []
    for message in request.messages:
        if message["role"] == "user" and isinstance(message["content"], list):
            texts += [b["text"] for b in message["content"] if b.get("type") == "text"]
    return texts


def test_a_pause_is_taken_at_the_next_step_boundary_and_frees_the_worker(launch, script, operator):
    run = None

    def pause_during_first_call(request):
        if request.metadata["turn"] == 0:
            assert steering.request_pause(run, by=operator)

    provider = script(
        [[tool_use("t_echo", text="a")], [text("done")]], on_call=pause_during_first_call
    )
    run = launch()
    assert drive(run) == [Run.Status.WAITING]
    assert provider.calls == 1  # the model step and its call were written; no second call
    assert run.is_paused and not run.lease_owner
    assert run.status_detail.startswith("paused by olivia at ")
    paused = run.steps.order_by("-seq").first()
    assert paused.data["event"] == "paused" and paused.data["by"] == "olivia"
    assert [d["tool"] for d in tool_steps(run)] == ["t_echo"]  # the boundary came after it

    assert steering.resume(run, by=operator) == "resumed"
    assert run.status == Run.Status.QUEUED and run.paused_at is None
    resumed = run.steps.order_by("-seq").first()
    assert resumed.data["event"] == "resumed" and resumed.data["by"] == "olivia"
    drive(run)
    assert run.termination_reason == Run.Termination.COMPLETED
    assert provider.calls == 2
    assert_timeline_sound(run)


def test_a_pause_asked_while_queued_is_taken_from_the_claim_s_own_read(
    launch, script, operator, monkeypatch
):
    # No look within the claim: what the claim read with the run must be enough.
    monkeypatch.setattr(owned, "RECHECK_AFTER_SECONDS", 3600)
    provider = script([[text("done")]])
    run = launch()
    assert steering.request_pause(run, by=operator)
    instruction, _ = steering.instruct(run, text="Be brief.", key="k1", by=operator)
    assert drive(run) == [Run.Status.WAITING]
    assert provider.calls == 0 and run.is_paused
    assert steering.resume(run, by=operator) == "resumed"
    assert drive(run)[-1] == Run.Status.SUCCEEDED
    # The instruction waiting at the claim reached the model's first turn.
    assert _user_texts(provider.requests[0])[-1].endswith("Be brief.")
    instruction.refresh_from_db()
    assert instruction.delivered_seq is not None


def test_a_double_pause_pauses_once(launch, script, operator):
    script([[text("done")]])
    run = launch()
    assert steering.request_pause(run, by=operator) is True
    assert steering.request_pause(run, by=operator) is False
    drive(run)
    assert run.is_paused
    paused = run.steps.filter(kind=Step.Kind.STATUS, data__event="paused")
    assert paused.count() == 1
    # Resumed, it runs to its end and does not pause again.
    steering.resume(run, by=operator)
    drive(run)
    assert run.status == Run.Status.SUCCEEDED


def test_resume_withdraws_a_pause_not_taken_and_refuses_a_run_not_paused(launch, script, operator):
    script([[text("done")]])
    run = launch()
    with pytest.raises(steering.SteerError) as refused:
        steering.resume(run, by=operator)
    assert refused.value.status == 409
    steering.request_pause(run, by=operator)
    assert steering.resume(run, by=operator) == "withdrawn"
    drive(run)
    assert run.status == Run.Status.SUCCEEDED


def test_a_paused_run_can_be_cancelled(launch, script, operator):
    script([[text("done")]])
    run = launch()
    steering.request_pause(run, by=operator)
    drive(run)
    assert run.cancel(by=operator)
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    with pytest.raises(steering.SteerError):
        steering.request_pause(run, by=operator)


def test_an_instruction_reaches_the_next_model_turn_once(launch, script, operator):
    run = None

    def instruct_during_first_call(request):
        if request.metadata["turn"] == 0:
            steering.instruct(run, text="use the EU warehouse", key="k1", by=operator)
            # A retried POST with the same key adds nothing.
            steering.instruct(run, text="use the EU warehouse", key="k1", by=operator)

    provider = script(
        [[tool_use("t_echo", text="a")], [tool_use("t_echo", text="b")], [text("done")]],
        on_call=instruct_during_first_call,
    )
    run = launch()
    drive(run)
    assert run.status == Run.Status.SUCCEEDED
    said = "[Instruction from the operator olivia] use the EU warehouse"
    assert said not in _user_texts(provider.requests[0])
    assert said in _user_texts(provider.requests[1])
    # Once in the conversation: the third call has it where the second had it, not twice.
    assert _user_texts(provider.requests[2]).count(said) == 1
    steps = run.steps.filter(kind=Step.Kind.OPERATOR)
    assert [(s.data["event"], s.data["by"], s.data["text"]) for s in steps] == [
        ("instruction", "olivia", "use the EU warehouse")
    ]
    instruction = Instruction.objects.get(run=run)
    assert instruction.delivered_seq == steps[0].seq
    # The conversation rebuilt from the timeline is what the model was sent.
    assert engine.conversation(run)[:-1] == provider.requests[-1].messages
    assert_timeline_sound(run)


def test_an_instruction_to_a_paused_run_comes_after_resume(launch, script, operator):
    provider = script([[text("first answer")]])
    run = launch()
    steering.request_pause(run, by=operator)
    drive(run)
    steering.instruct(run, text="stop after this order", key="k2", by=operator)
    steering.resume(run, by=operator)
    drive(run)
    assert "[Instruction from the operator olivia] stop after this order" in "".join(
        str(b) for b in provider.requests[0].messages[0]["content"]
    )
    assert engine.conversation(run)[:-1] == provider.requests[0].messages


def test_an_instruction_key_reused_for_other_text_is_refused(launch, script, operator):
    script([[text("done")]])
    run = launch()
    steering.instruct(run, text="one", key="same", by=operator)
    with pytest.raises(steering.SteerError) as refused:
        steering.instruct(run, text="two", key="same", by=operator)
    assert refused.value.status == 409
    with pytest.raises(steering.SteerError) as empty:
        steering.instruct(run, text="   ", key="k", by=operator)
    assert empty.value.status == 422


# --- a failed call held for an operator ---------------------------------------------------
@pytest.fixture
def asking(test_agent, no_enqueue):
    agent = register(dataclasses.replace(test_agent, on_failure="ask"))

    def make() -> Run:
        return engine.launch(agent=agent, input={"task": "t", "script": ""}, provider="scripted")

    return make


def _held(run: Run) -> Recovery:
    assert run.status == Run.Status.WAITING and not run.lease_owner
    return Recovery.objects.get(run=run, status=Recovery.Status.OPEN)


def test_a_failed_call_waits_for_an_operator_and_a_retry_runs_it_again(asking, script, operator):
    FAILURES_LEFT["t_flaky"] = 3  # its three attempts fail; an operator's retry then works
    provider = script(
        [[tool_use("t_flaky", n=1)], [text("done")]],
    )
    run = asking()
    assert drive(run) == [Run.Status.WAITING]
    recovery = _held(run)
    failed = run.steps.get(seq=recovery.failed_seq)
    assert failed.data["held"] and failed.data["is_error"] and recovery.tool == "t_flaky"
    assert provider.calls == 1  # the model has not been told

    steering.choose(run, steering.Choice("retry"), by=operator)
    drive(run)
    assert run.status == Run.Status.SUCCEEDED
    calls = tool_steps(run, "t_flaky")
    assert [d["is_error"] for d in calls] == [True, False]
    choice = run.steps.get(kind=Step.Kind.OPERATOR)
    assert choice.data["choice"] == "retry" and choice.data["by"] == "olivia"
    # The model saw one result for its call: the retried one.
    results = [
        b
        for m in provider.requests[1].messages
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    assert len(results) == 1 and "is_error" not in results[0]
    assert engine.conversation(run)[:-1] == provider.requests[-1].messages
    assert_timeline_sound(run)


def test_a_retry_with_edited_arguments_is_gated_again(asking, script, operator, approver):
    # t_gated refuses a negative n here: the operator retries it with n edited.
    script([[tool_use("t_gated", n=-1)], [text("done")]])
    harness_tool = harness.REGISTRY["t_gated"]
    real = harness_tool.fn

    def refuse_negative(n: int) -> dict:
        if n < 0:
            raise harness.ToolError("n must not be negative")
        return real(n=n)

    harness.REGISTRY["t_gated"] = dataclasses.replace(harness_tool, fn=refuse_negative)
    try:
        run = asking()
        drive(run)  # gated first
        approval = Approval.objects.get(run=run)
        decisions.decide(approval.pk, user=approver, decision="approve")
        drive(run)
        recovery = _held(run)
        steering.choose(run, steering.Choice("retry", args={"n": 5}), by=operator)
        drive(run)
        # The edited call waits for an approver again: an approval of n=-1 approves nothing.
        assert run.status == Run.Status.WAITING
        again = Approval.objects.filter(run=run, status="pending").get()
        assert again.args == {"n": 5}
        decisions.decide(again.pk, user=approver, decision="approve")
        drive(run)
    finally:
        harness.REGISTRY["t_gated"] = harness_tool
    assert run.status == Run.Status.SUCCEEDED
    assert [(d["args"], d["is_error"]) for d in tool_steps(run, "t_gated")] == [
        ({"n": -1}, True),
        ({"n": 5}, False),
    ]
    recovery.refresh_from_db()
    assert recovery.edited_args == {"n": 5} and recovery.decided_by == operator
    # Two attempts, two ledger entries: the failed one's key does not answer the retry.
    assert SideEffect.objects.filter(run=run, tool="t_gated").count() == 2


def test_skip_gives_the_agent_the_note_as_the_result(asking, script, operator):
    provider = script([[tool_use("t_fail", n=1)], [text("done")]])
    run = asking()
    drive(run)
    _held(run)
    steering.choose(run, steering.Choice("skip", note="order already shipped"), by=operator)
    drive(run)
    assert run.status == Run.Status.SUCCEEDED
    results = [d for d in tool_steps(run, "t_fail") if not d.get("held")]
    assert results[0]["result"] == {"skipped_by": "olivia", "note": "order already shipped"}
    assert "order already shipped" in str(provider.requests[1].messages[-1])
    assert CALLS["t_fail"] == 1


def test_instruct_tells_the_agent_the_failure_and_the_instruction(asking, script, operator):
    provider = script([[tool_use("t_fail", n=1)], [text("done")]])
    run = asking()
    drive(run)
    _held(run)
    steering.choose(run, steering.Choice("instruct", text="use the EU warehouse"), by=operator)
    drive(run)
    assert run.status == Run.Status.SUCCEEDED
    last = provider.requests[1].messages[-1]["content"]
    assert last[0]["type"] == "tool_result" and last[0]["is_error"]
    assert last[1]["text"] == "[Instruction from the operator olivia] use the EU warehouse"
    assert engine.conversation(run)[:-1] == provider.requests[-1].messages
    assert_timeline_sound(run)


def test_a_choice_applies_once(asking, script, operator):
    script([[tool_use("t_fail", n=1)], [text("done")]])
    run = asking()
    drive(run)
    steering.choose(run, steering.Choice("skip"), by=operator)
    with pytest.raises(steering.SteerError) as again:
        steering.choose(run, steering.Choice("retry"), by=operator)
    assert again.value.status == 409 and "already chosen: skip by olivia" in str(again.value)


def test_invalid_edited_arguments_are_refused_before_anything_changes(asking, script, operator):
    script([[tool_use("t_fail", n=1)], [text("done")]])
    run = asking()
    drive(run)
    with pytest.raises(steering.SteerError) as bad:
        steering.choose(run, steering.Choice("retry", args={"n": "many"}), by=operator)
    assert bad.value.status == 422
    assert _held(run).status == Recovery.Status.OPEN


def test_without_ask_a_failed_call_goes_to_the_agent_as_before(launch, script):
    provider = script([[tool_use("t_fail", n=1)], [text("done")]])
    run = launch()
    drive(run)
    assert run.status == Run.Status.SUCCEEDED and not Recovery.objects.exists()
    assert provider.calls == 2


# --- "resume from here": a failed run reopened ----------------------------------------------
def _three_failures(tool: str) -> list:
    return [[tool_use(tool, n=i)] for i in (1, 2, 3)] + [[text("done")]]


def test_a_run_ended_by_errors_is_reopened_and_its_failed_call_retried_edited(
    launch, script, operator
):
    FAILURES_LEFT["t_flaky"] = 9  # each of the three calls fails its three attempts
    provider = script(_three_failures("t_flaky"))
    run = launch()
    drive(run)
    assert run.termination_reason == Run.Termination.CONSECUTIVE_ERRORS
    assert provider.calls == 3
    found = steering.reopening(run)
    assert found.choices == ("retry", "skip", "instruct") and found.failed_call.data["args"] == {
        "n": 3
    }

    FAILURES_LEFT["t_flaky"] = 0  # the upstream is back (its circuit opened meanwhile)
    breaker.reset()
    steering.reopen(run, steering.Choice("retry", args={"n": 30}), by=operator)
    assert run.status == Run.Status.QUEUED and not run.termination_reason
    assert run.consecutive_errors == 0 and run.finished_at is None
    reopened = run.steps.order_by("-seq").first()
    assert reopened.data["event"] == "reopened" and reopened.data["by"] == "olivia"
    drive(run)
    assert run.status == Run.Status.SUCCEEDED
    assert [d["args"] for d in tool_steps(run, "t_flaky")][-1] == {"n": 30}
    # The model was told the retried call's result for its third call, not the failure.
    last = provider.requests[-1].messages[-1]["content"]
    assert len(last) == 1 and "is_error" not in last[0] and '"ok":30' in last[0]["content"]
    assert engine.conversation(run)[:-1] == provider.requests[-1].messages
    assert_timeline_sound(run)


def test_a_reopened_run_may_skip_its_failed_call_with_a_note(launch, script, operator):
    provider = script(_three_failures("t_fail"))
    run = launch()
    drive(run)
    steering.reopen(run, steering.Choice("skip", note="not needed"), by=operator)
    drive(run)
    assert run.status == Run.Status.SUCCEEDED
    assert "not needed" in provider.requests[-1].messages[-1]["content"][0]["content"]
    assert engine.conversation(run)[:-1] == provider.requests[-1].messages


def test_a_model_error_is_retried_by_reopening(launch, script, operator):
    provider = script([[text("done")]], errors=[LLMError("bad request", status=400)])
    run = launch()
    drive(run)
    assert run.termination_reason == Run.Termination.LLM_ERROR
    assert steering.reopening(run).choices == ("retry", "instruct")
    with pytest.raises(steering.SteerError) as skip:
        steering.reopen(run, steering.Choice("skip"), by=operator)
    assert skip.value.status == 422
    steering.reopen(run, steering.Choice("instruct", text="answer briefly"), by=operator)
    drive(run)
    assert run.status == Run.Status.SUCCEEDED and provider.calls == 2
    assert "[Instruction from the operator olivia] answer briefly" in str(
        provider.requests[1].messages
    )


def test_a_run_that_hit_a_limit_or_succeeded_is_not_reopened_and_says_why(launch, script, operator):
    script([[tool_use("t_echo", text=str(i))] for i in range(5)])
    run = launch(max_steps=2)
    drive(run)
    assert run.termination_reason == Run.Termination.MAX_STEPS
    with pytest.raises(steering.SteerError) as limit:
        steering.reopen(run, steering.Choice("retry"), by=operator)
    assert limit.value.status == 409 and "fork it from a checkpoint" in str(limit.value)
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED


def test_a_run_whose_chain_does_not_verify_is_not_reopened(launch, script, operator):
    script(_three_failures("t_fail"))
    run = launch()
    drive(run)
    harness.tamper(
        "UPDATE runs_step SET data = %s WHERE run_id = %s AND seq = 2",
        ['{"event": "started", "tampered": true}', run.pk.hex],
    )
    found = steering.reopening(run)
    assert not found.choices and "does not verify from step #2" in found.why_not


def test_an_asking_agent_waits_at_its_error_limit_and_goes_on_when_told(asking, script, operator):
    # Unknown tools: errors the model makes, told to it, not calls to hold.
    provider = script([[tool_use("t_nope", n=i)] for i in range(3)] + [[text("done")]])
    run = asking()
    drive(run)
    assert run.status == Run.Status.WAITING and provider.calls == 3
    recovery = _held(run)
    assert recovery.tool == "" and "3 consecutive errors" in recovery.error
    with pytest.raises(steering.SteerError) as skip:
        steering.choose(run, steering.Choice("skip"), by=operator)
    assert skip.value.status == 422
    steering.choose(run, steering.Choice("instruct", text="use t_echo"), by=operator)
    assert run.consecutive_errors == 0
    drive(run)
    assert run.status == Run.Status.SUCCEEDED and provider.calls == 4
    assert "[Instruction from the operator olivia] use t_echo" in str(provider.requests[3].messages)
    assert_timeline_sound(run)
