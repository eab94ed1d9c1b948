"""Verification and output validation in the engine: a final answer is checked (its output
schema, then the agent's verifier) before the run may succeed; a failure goes back to the
agent with the reason, a bounded number of times, then fails the run or asks a person; a
tool's result that breaks its output schema is a guard step and an error the model sees."""

import dataclasses

import pydantic
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from typing_extensions import TypedDict  # pydantic needs it on Python 3.11

from agentkit.agents import register
from agentkit.llm.scripted import text, tool_use
from agentkit.tools import Blast, tool
from agentkit.verification import Verifier
from approvals import decisions
from approvals.models import Approval
from history.fork import fork
from history.replay import replay
from runs import engine
from runs.models import Run, SideEffect, Step

from .. import harness

pytestmark = pytest.mark.django_db

SHAPE = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}
ANSWER_SCHEMA = {
    "type": "object",
    "required": ["total"],
    "properties": {"total": {"type": "number"}},
    "additionalProperties": False,
}


@tool(reversible=True, blast=Blast.NONE, name="t_shaped", output_schema=SHAPE)
def t_shaped(n: int) -> dict:
    """Returns {"n": n} for n >= 0, and a malformed result for a negative n."""
    harness.CALLS["t_shaped"] += 1
    return {"n": n} if n >= 0 else {"n": "minus"}


@tool(reversible=False, blast=Blast.LOW, name="t_shaped_effect", output_schema=SHAPE)
def t_shaped_effect(n: int) -> dict:
    """A call with side effects whose result breaks its schema for a negative n."""
    harness.CALLS["t_shaped_effect"] += 1
    return {"n": n} if n >= 0 else {"n": None}


class Price(pydantic.BaseModel):
    amount: float
    currency: str


class Stock(TypedDict):
    sku: str
    count: int


@tool(reversible=True, blast=Blast.NONE, name="t_price")
def t_price(sku: str) -> Price:
    """A typed result: its schema comes from the return annotation."""
    return Price(amount=9.5, currency="EUR")


@tool(reversible=True, blast=Blast.NONE, name="t_stock")
def t_stock(sku: str) -> Stock:
    """A TypedDict result that leaves out a key for an unknown sku."""
    return {"sku": sku, "count": 3} if sku == "A" else {"sku": sku}


@tool(reversible=True, blast=Blast.NONE, name="t_total")
def t_total() -> dict:
    """The true total (what a verifier recomputes)."""
    harness.CALLS["t_total"] += 1
    return {"total": 42}


def must_say_42(result) -> str | None:
    return None if "42" in result.output else f"the total is 42, not {result.output!r}"


def events(run: Run) -> list[tuple[str, object]]:
    out = []
    for kind, data in run.steps.order_by("seq").values_list("kind", "data"):
        if kind == Step.Kind.VERIFY:
            out.append((kind, data.get("event") or data["passed"]))
        elif kind == Step.Kind.GUARD:
            out.append((kind, data["passed"]))
        else:
            out.append((kind, data.get("event") or data.get("tool") or ""))
    return out


@pytest.fixture
def agent_with(test_agent, no_enqueue):
    """Register the test agent with these declarations and launch a run of it."""

    def launch(**declared):
        tools = (*test_agent.tools, "t_shaped", "t_shaped_effect", "t_total", "t_price", "t_stock")
        agent = register(dataclasses.replace(test_agent, tools=tools, **declared))
        return engine.launch(agent=agent, input={"task": "add up", "script": ""})

    return launch


def told(request) -> str:
    return request.messages[-1]["content"][-1]["text"]


# --- the verifier -----------------------------------------------------------------------------
def test_an_answer_that_passes_ends_the_run_after_its_verify_step(agent_with, script):
    script([[text("The total is 42.")]])
    run = agent_with(verifier=Verifier(check=must_say_42))
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    run.refresh_from_db()
    assert run.output == "The total is 42." and run.termination_reason == "completed"
    assert events(run)[1:] == [
        (Step.Kind.STATUS, "started"),
        (Step.Kind.LLM, ""),
        (Step.Kind.VERIFY, True),
        (Step.Kind.STATUS, "terminated"),
    ]
    verify = run.steps.get(kind=Step.Kind.VERIFY).data
    assert verify["verifier"] == "must_say_42" and verify["attempt"] == 1
    assert run.agent_config["verifier"] == {
        "kind": "check",
        "name": "must_say_42",
        "max_attempts": 2,
        "on_fail": "agent",
    }
    harness.assert_timeline_sound(run)


def test_a_failed_check_goes_back_to_the_agent_with_the_reason(agent_with, script):
    provider = script([[text("The total is 41.")], [text("Sorry: the total is 42.")]])
    run = agent_with(verifier=Verifier(check=must_say_42))
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    assert told(provider.requests[1]) == (
        "Your answer did not pass verification (must_say_42, attempt 1 of 2): "
        "the total is 42, not 'The total is 41.'\nCorrect it and give your final answer again."
    )
    run.refresh_from_db()
    assert run.output == "Sorry: the total is 42."
    assert [e for e in events(run) if e[0] in (Step.Kind.LLM, Step.Kind.VERIFY)] == [
        (Step.Kind.LLM, ""),
        (Step.Kind.VERIFY, False),
        (Step.Kind.LLM, ""),
        (Step.Kind.VERIFY, True),
    ]
    # What the agent was told is in the timeline: a resumed run's conversation has it.
    assert engine.conversation(run)[:3] == provider.requests[1].messages


def test_a_verifier_out_of_attempts_fails_the_run(agent_with, script):
    script([[text("41")], [text("43")], [text("44")]])
    run = agent_with(verifier=Verifier(check=must_say_42, max_attempts=2))
    assert engine.advance(run.pk, time_slice=30) == Run.Status.FAILED
    run.refresh_from_db()
    assert run.termination_reason == Run.Termination.VERIFICATION_FAILED
    assert run.status_detail == "must_say_42: the total is 42, not '43'"
    assert run.output == "" and run.step_count == 2
    last = run.steps.filter(kind=Step.Kind.VERIFY).order_by("-seq").first().data
    assert last["attempt"] == 2 and "told" not in last


def test_a_tool_verifier_recomputes_with_a_read_only_call(agent_with, script):
    script([[text('{"total": 40}')], [text('{"total": 42}')]])

    def same_total(result, observed):
        said = result.json()["total"]
        return None if said == observed["total"] else f"recomputed {observed['total']}, not {said}"

    run = agent_with(verifier=Verifier(tool=("t_total", lambda r: {}), check=same_total))
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    first, second = (s.data for s in run.steps.filter(kind=Step.Kind.VERIFY).order_by("seq"))
    assert first["tool"] == "t_total" and first["result"] == {"total": 42}
    assert first["reason"] == "recomputed 42, not 40" and second["passed"]
    assert harness.CALLS["t_total"] == 2


def test_a_verifier_tool_must_have_no_side_effects(test_agent):
    with pytest.raises(ValueError, match="no side effects"):
        register(
            dataclasses.replace(
                test_agent,
                verifier=Verifier(tool=("t_shaped_effect", lambda r: {"n": 1}), check=must_say_42),
            )
        )


def test_a_model_verifier_is_a_second_model_call_charged_to_the_run(agent_with, script):
    provider = script(
        [[text("The total is 41.")], [text("The total is 42.")]],
        verifier_turns=[[text("FAIL: 41 is off by one")], [text("PASS")]],
    )
    run = agent_with(verifier=Verifier(prompt="Check the arithmetic.", model="claude-haiku-4-5"))
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    review = provider.requests[1]
    assert review.metadata["purpose"] == "verify" and review.model == "claude-haiku-4-5"
    assert review.system.startswith("Check the arithmetic.") and review.tools == []
    assert "The answer to check:\nThe total is 41." in review.messages[0]["content"]
    # The agent's own turns did not shift: its second turn got the reason.
    assert "41 is off by one" in told(provider.requests[2])
    run.refresh_from_db()
    verifies = list(run.steps.filter(kind=Step.Kind.VERIFY).order_by("seq"))
    assert [s.data["passed"] for s in verifies] == [False, True]
    assert all(s.cost_usd > 0 and s.tokens_in > 0 for s in verifies)
    llm_cost = sum(s.cost_usd for s in run.steps.filter(kind=Step.Kind.LLM))
    assert run.cost_usd == llm_cost + sum(s.cost_usd for s in verifies)
    assert run.step_count == 2  # the agent's turns; max_steps counts those


# --- a person decides --------------------------------------------------------------------------
def failed_to_person(agent_with, script, *more_turns):
    script([[text("41")], *more_turns])
    run = agent_with(verifier=Verifier(check=must_say_42, max_attempts=1, on_fail="person"))
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    return run, Approval.objects.get(run=run)


def test_out_of_attempts_a_person_is_asked_with_the_reason(agent_with, script, approver, client):
    run, approval = failed_to_person(agent_with, script)
    assert approval.kind == Approval.Kind.QUESTION and approval.status == "pending"
    assert "the total is 42, not '41'" in approval.question
    assert approval.explanation.startswith("verification failed: the total is 42")
    assert approval.context_summary == "41"
    # The approval card shows why, and the answer in question (escaped: the model wrote it).
    client.force_login(approver)
    card = client.get(f"/approvals/{approval.pk}/").content.decode()
    assert "verification failed: the total is 42, not &#x27;41&#x27;" in card
    decisions.decide(approval.pk, user=approver, decision="answer", answer="accept")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    run.refresh_from_db()
    assert run.output == "41"
    assert events(run)[-2:] == [(Step.Kind.VERIFY, "accepted"), (Step.Kind.STATUS, "terminated")]


def test_a_person_sends_the_answer_back_with_a_note(agent_with, script, approver):
    run, approval = failed_to_person(agent_with, script, [text("42")])
    decisions.decide(approval.pk, user=approver, decision="answer", answer="Recount the rows.")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    run.refresh_from_db()
    assert run.output == "42"
    note = run.steps.get(kind=Step.Kind.VERIFY, data__event="sent_back").data
    assert note["told"] == "A reviewer (arthur) sent your answer back: Recount the rows."
    assert engine.conversation(run)[-2]["content"][-1]["text"] == note["told"]


@pytest.mark.parametrize("decision", ["fail", "reject"])
def test_a_person_fails_the_run(agent_with, script, approver, decision):
    run, approval = failed_to_person(agent_with, script)
    if decision == "fail":
        decisions.decide(approval.pk, user=approver, decision="answer", answer="fail")
    else:
        decisions.decide(approval.pk, user=approver, decision="reject", reason="made up")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.FAILED
    run.refresh_from_db()
    assert run.termination_reason == Run.Termination.VERIFICATION_FAILED
    assert "arthur" in run.status_detail


# --- crash and resume ---------------------------------------------------------------------------
class WorkerDied(BaseException):
    """Not an Exception: nothing in the engine catches it, like a killed process."""


def test_a_worker_dying_before_the_check_checks_on_resume_without_asking_again(agent_with, script):
    provider = script([[text("41")], [text("42")]])
    deaths = [WorkerDied()]

    def dies_once(result):
        if deaths:
            raise deaths.pop()
        return must_say_42(result)

    run = agent_with(verifier=Verifier(check=dies_once))
    with pytest.raises(WorkerDied):
        engine.advance(run.pk, time_slice=30)
    assert provider.calls == 1  # the answer was written, its check was not
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now())
    assert engine.advance(run.pk, worker="w2", time_slice=30) == Run.Status.SUCCEEDED
    # The resumed worker checked the recorded answer, told the agent, and asked once more.
    assert provider.calls == 2
    assert "the total is 42, not '41'" in told(provider.requests[1])


def test_a_resumed_run_is_told_the_reason_from_the_timeline(agent_with, script):
    provider = script([[text("41")], [text("42")]], errors=[None, WorkerDied()])
    run = agent_with(verifier=Verifier(check=must_say_42))
    with pytest.raises(WorkerDied):  # dies during the model call after the failed check
        engine.advance(run.pk, time_slice=30)
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now())
    assert engine.advance(run.pk, worker="w2", time_slice=30) == Run.Status.SUCCEEDED
    assert provider.requests[2].messages == provider.requests[1].messages
    assert "the total is 42, not '41'" in told(provider.requests[2])


# --- output validation --------------------------------------------------------------------------
def test_a_final_answer_breaking_its_schema_goes_back_to_the_agent(agent_with, script):
    provider = script([[text("The total is 42.")], [text('Here: {"total": 42}')]])
    run = agent_with(output_schema=ANSWER_SCHEMA)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    message = told(provider.requests[1])
    assert message.startswith(
        "Your final answer does not match the required output schema: the answer is not JSON"
    )
    assert '"required":["total"]' in message
    run.refresh_from_db()
    assert run.output == 'Here: {"total": 42}'
    guards = [s.data for s in run.steps.filter(kind=Step.Kind.GUARD).order_by("seq")]
    assert [g["passed"] for g in guards] == [False, True]
    assert guards[0]["subject"] == "final answer" and guards[0]["attempt"] == 1


def test_an_answer_invalid_every_time_ends_the_run_as_output_invalid(agent_with, script):
    script([[text('{"total": "lots"}')], [text('{"total": 42, "extra": 1}')]])
    run = agent_with(output_schema=ANSWER_SCHEMA, output_attempts=2)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.FAILED
    run.refresh_from_db()
    assert run.termination_reason == Run.Termination.OUTPUT_INVALID
    first, second = (s.data for s in run.steps.filter(kind=Step.Kind.GUARD).order_by("seq"))
    assert first["errors"] == ["total: 'lots' is not of type 'number'"]
    assert "Additional properties are not allowed ('extra' was unexpected)" in second["errors"][0]


def test_the_schema_is_checked_before_the_verifier(agent_with, script):
    script([[text("41")], [text('{"total": 41}')], [text('{"total": 42}')]])

    def total_42(result):
        return None if result.json()["total"] == 42 else "not 42"

    run = agent_with(output_schema=ANSWER_SCHEMA, verifier=Verifier(check=total_42))
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    kinds = [e for e in events(run) if e[0] in (Step.Kind.GUARD, Step.Kind.VERIFY)]
    assert kinds == [
        (Step.Kind.GUARD, False),  # not JSON: the verifier does not run
        (Step.Kind.GUARD, True),
        (Step.Kind.VERIFY, False),
        (Step.Kind.GUARD, True),
        (Step.Kind.VERIFY, True),
    ]


def test_a_tool_result_breaking_its_schema_is_an_error_the_model_sees(agent_with, script):
    provider = script([[tool_use("t_shaped", n=-1)], [tool_use("t_shaped", n=2)], [text("ok")]])
    run = agent_with()
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    result = provider.requests[1].messages[-1]["content"][0]
    assert result["is_error"] is True
    assert result["content"].startswith("t_shaped returned a result that does not match")
    assert "minus" in result["content"] and "'minus' is not of type 'integer'" in result["content"]
    bad = run.steps.filter(kind=Step.Kind.TOOL).order_by("seq").first()
    assert bad.data["is_error"] and bad.data["rejected_output"] == {"n": "minus"}
    guard = run.steps.get(kind=Step.Kind.GUARD)
    assert guard.seq == bad.seq + 1 and guard.data["tool"] == "t_shaped"
    # What the model was sent is what the timeline rebuilds (no guard step in it).
    assert engine.conversation(run)[:-1] == provider.requests[-1].messages


def test_a_side_effect_whose_result_breaks_its_schema_stays_committed(agent_with, script):
    provider = script([[tool_use("t_shaped_effect", n=-1)], [text("ok")]])
    run = agent_with(gates=dataclasses.replace(harness.register_agent().gates))
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    assert provider.requests[1].messages[-1]["content"][0]["is_error"] is True
    effect = SideEffect.objects.get(run=run)
    # It happened: the ledger says so, and a resume never runs it again.
    assert effect.status == SideEffect.Status.COMMITTED and effect.result == {"result": {"n": None}}
    assert run.steps.filter(kind=Step.Kind.GUARD).count() == 1
    assert harness.CALLS["t_shaped_effect"] == 1


# --- the plain path -----------------------------------------------------------------------------
# An agent that declares no checks: what the advance below costs, in statements. Measured
# before verification existed; a check on the plain path would add to it. An operator's pause
# or instructions and whether the agent has a budget are read with the run's row by the claim
# (runs/engine/owned.beside_run): no statement of their own.
PLAIN_RUN_STATEMENTS = {"sqlite": 19, "postgresql": 5}


def test_an_agent_without_checks_pays_nothing_for_them(launch, script):
    script([[tool_use("t_echo", text="x")], [text("done")]])
    run = launch()
    with CaptureQueriesContext(connection) as queries:
        assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    # One read more when a step took over a second (owned.RECHECK_AFTER_SECONDS: the worker
    # looks again at its run), as on a loaded machine; never more than that.
    expected = PLAIN_RUN_STATEMENTS[connection.vendor]
    assert expected <= len(queries.captured_queries) <= expected + 1
    # The final answer and the run's end are still written together.
    ended, answer = run.steps.order_by("-seq")[:2]
    assert answer.kind == Step.Kind.LLM and ended.data["event"] == "terminated"
    assert not run.steps.filter(kind__in=(Step.Kind.VERIFY, Step.Kind.GUARD)).exists()


# --- replay ---------------------------------------------------------------------------------------
def test_a_model_verifier_is_answered_from_the_recording_in_a_replay(agent_with, script):
    script(
        [[text("41")], [text("42")]],
        verifier_turns=[[text("FAIL: off by one")], [text("PASS")]],
    )
    run = agent_with(verifier=Verifier(prompt="Check it."))
    engine.advance(run.pk, time_slice=30)
    run.refresh_from_db()
    script([])  # a replay must not ask any model: the recording answers
    result = replay(run)
    assert result.identical, result.summary
    assert result.compared == run.last_seq


def test_a_person_s_verdict_is_replayed_from_the_recording(agent_with, script, approver):
    run, approval = failed_to_person(agent_with, script, [text("42")])
    decisions.decide(approval.pk, user=approver, decision="answer", answer="Recount.")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    run.refresh_from_db()
    result = replay(run)
    assert result.identical, result.summary
    assert Approval.objects.filter(run__trigger=Run.Trigger.REPLAY).count() == 0


def test_a_rejected_tool_output_replays_the_same(agent_with, script):
    script([[tool_use("t_shaped", n=-1)], [text("ok")]])
    run = agent_with()
    engine.advance(run.pk, time_slice=30)
    run.refresh_from_db()
    calls = harness.CALLS["t_shaped"]
    result = replay(run)
    assert result.identical, result.summary
    assert harness.CALLS["t_shaped"] == calls  # the recording answered


# --- after chosen tools ---------------------------------------------------------------------------
def echoed_ok(result) -> str | None:
    call = result.json()
    return None if call["result"]["echo"] == "ok" else f"{call['args']['text']!r} is not ok"


def test_a_verifier_after_a_tool_checks_each_call_and_the_run_goes_on(agent_with, script):
    provider = script(
        [
            [tool_use("t_echo", text="bad")],
            [tool_use("t_echo", text="ok"), tool_use("t_echo", text="worse")],
            [text("done")],
        ]
    )
    run = agent_with(verifier=Verifier(check=echoed_ok, after_tools=("t_echo",)))
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    assert [e for e in events(run) if e[0] != Step.Kind.STATUS] == [
        (Step.Kind.LLM, ""),
        (Step.Kind.TOOL, "t_echo"),
        (Step.Kind.VERIFY, False),
        (Step.Kind.LLM, ""),
        (Step.Kind.TOOL, "t_echo"),
        (Step.Kind.VERIFY, True),  # checked before the turn's next call runs
        (Step.Kind.TOOL, "t_echo"),
        (Step.Kind.VERIFY, False),  # its own first attempt: a pass resets the count
        (Step.Kind.LLM, ""),  # the final answer: not what this verifier checks
    ]
    first = provider.requests[1].messages[-1]["content"]
    assert first[0]["type"] == "tool_result"
    assert first[1]["text"].startswith(
        "Your call to t_echo did not pass verification (echoed_ok, attempt 1 of 2): 'bad' is not ok"
    )
    last = provider.requests[2].messages[-1]["content"]
    assert [b["type"] for b in last] == ["tool_result", "tool_result", "text"]
    assert "'worse' is not ok" in last[2]["text"]
    assert engine.conversation(run)[:-1] == provider.requests[2].messages
    verify = run.steps.filter(kind=Step.Kind.VERIFY).order_by("seq").last().data
    assert verify["after"] == "t_echo" and verify["attempt"] == 1


def test_a_call_that_fails_its_check_too_often_fails_the_run(agent_with, script):
    script([[tool_use("t_echo", text="bad")], [tool_use("t_echo", text="bad!")], [text("x")]])
    run = agent_with(verifier=Verifier(check=echoed_ok, after_tools=("t_echo",)))
    assert engine.advance(run.pk, time_slice=30) == Run.Status.FAILED
    run.refresh_from_db()
    assert run.termination_reason == Run.Termination.VERIFICATION_FAILED
    assert run.step_count == 2


# --- forks --------------------------------------------------------------------------------------
def test_a_fork_of_an_unverified_answer_checks_it_or_follows_the_instruction(
    agent_with, script, approver
):

    script([[text("41")], [text("42")]])
    run, approval = failed_to_person(agent_with, script, [text("42")])
    answered = run.steps.get(kind=Step.Kind.LLM).seq  # its checkpoint: the check is due
    again = fork(run, answered)
    assert engine.advance(again.pk, time_slice=30) == Run.Status.WAITING
    asked = Approval.objects.get(run=again)  # the fork's own question, not the origin's
    assert asked.pk != approval.pk and "the total is 42, not '41'" in asked.question
    told = fork(run, answered, instruction="Count again.")
    assert engine.advance(told.pk, time_slice=30) == Run.Status.SUCCEEDED
    told.refresh_from_db()
    assert told.output == "42"


def test_a_person_accepts_a_call_that_failed_its_check_and_the_run_goes_on(
    agent_with, script, approver
):
    script([[tool_use("t_echo", text="bad")], [text("done")]])
    verifier = Verifier(check=echoed_ok, after_tools=("t_echo",), max_attempts=1, on_fail="person")
    run = agent_with(verifier=verifier)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    approval = Approval.objects.get(run=run)
    assert approval.question.startswith("The agent's call to t_echo failed verification")
    assert approval.tool_use_id.endswith(":t_echo")
    decisions.decide(approval.pk, user=approver, decision="answer", answer="accept")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    run.refresh_from_db()
    assert run.output == "done"  # the final answer, not the accepted call


def test_a_tool_s_return_annotation_is_its_output_schema(agent_with, script):
    provider = script(
        [[tool_use("t_price", sku="A"), tool_use("t_stock", sku="A"), tool_use("t_stock", sku="B")]]
    )
    run = agent_with()
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    price, stock, missing = harness.tool_steps(run)
    assert price["result"] == {"amount": 9.5, "currency": "EUR"}  # the model, as JSON
    assert stock["result"] == {"sku": "A", "count": 3}
    assert missing["is_error"] and "'count' is a required property" in missing["error"]
    assert run.steps.get(kind=Step.Kind.GUARD).data["tool"] == "t_stock"
    assert provider.requests[1].messages[-1]["content"][2]["is_error"] is True


def test_an_agent_that_asks_on_failure_puts_a_failed_verification_before_a_person(
    agent_with, script, approver
):
    script([[text("41")], [text("42")]])
    run = agent_with(verifier=Verifier(check=must_say_42, max_attempts=1), on_failure="ask")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    approval = Approval.objects.get(run=run)
    assert "the total is 42, not '41'" in approval.question
    decisions.decide(approval.pk, user=approver, decision="answer", answer="Recount the rows.")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
