"""The loop believes what the model API says about how an answer ended (`stop_reason`): a
cut-off answer is never the output and never runs a call, a paused turn goes on, a refusal
fails the run visibly."""

import copy
from decimal import Decimal

import pytest

from agentkit.llm.base import LLMRequest, LLMResponse, Usage
from runs.engine import model
from runs.models import Run, Step

from .. import harness
from ..harness import drive

pytestmark = pytest.mark.django_db

CUT = "Revenue by category: Electronics 41%, Home 2"
FULL = "Revenue by category: Electronics 41%, Home 23%, Garden 36%."


class Answers:
    """A provider answering (content, stop_reason) pairs in order; records each request."""

    name = "scripted"

    def __init__(self, *answers: tuple[list[dict], str]):
        self.answers = list(answers)
        self.requests: list[LLMRequest] = []

    def complete(self, request: LLMRequest, *, on_text=None) -> LLMResponse:
        self.requests.append(copy.deepcopy(request))
        content, stop = self.answers[len(self.requests) - 1]
        return LLMResponse(
            content=content,
            stop_reason=stop,
            usage=Usage(input_tokens=10, output_tokens=5),
            model=request.model,
            cost_usd=Decimal("0.001"),
        )


@pytest.fixture
def answers(monkeypatch):
    def install(*pairs) -> Answers:
        provider = Answers(*pairs)
        monkeypatch.setattr("agentkit.agents.provider_for_run", lambda run: provider)
        return provider

    return install


def text(value: str) -> list[dict]:
    return [{"type": "text", "text": value}]


def echo_call(value: str) -> list[dict]:
    return [{"type": "tool_use", "id": "toolu_1", "name": "t_echo", "input": {"text": value}}]


def llm_steps(run: Run) -> list[dict]:
    return [s.data for s in run.steps.filter(kind=Step.Kind.LLM).order_by("seq")]


def test_a_cut_off_answer_is_asked_again_with_more_room(launch, answers):
    provider = answers((text(CUT), "max_tokens"), (text(FULL), "end_turn"))
    run = launch()
    drive(run)
    assert (run.status, run.output) == (Run.Status.SUCCEEDED, FULL)
    assert [r.max_tokens for r in provider.requests] == [1024, 2048]
    first, _ = llm_steps(run)
    assert first["stop_reason"] == "max_tokens" and first["discarded"]
    assert first["asked_again_with"] == 2048
    # The cut-off text never entered the conversation the model was asked again with.
    assert CUT not in repr(provider.requests[1].messages)
    assert run.step_count == 2  # both answers were paid for and count


def test_an_answer_cut_off_even_with_more_room_fails_the_run_visibly(launch, answers):
    provider = answers(*[(text(CUT), "max_tokens")] * 3)
    run = launch()
    drive(run)
    assert run.status == Run.Status.FAILED
    assert run.termination_reason == Run.Termination.TRUNCATED
    assert "cut off" in run.status_detail and "4096" in run.status_detail
    assert run.output == ""  # the cut-off text is not an output
    assert [r.max_tokens for r in provider.requests] == [1024, 2048, 4096]


def test_a_cut_off_call_never_runs(launch, answers):
    harness.CALLS.clear()
    answers((echo_call("half"), "max_tokens"), (text(FULL), "end_turn"))
    run = launch()
    drive(run)
    assert harness.CALLS["t_echo"] == 0
    assert not run.steps.filter(kind=Step.Kind.TOOL).exists()
    assert run.status == Run.Status.SUCCEEDED


def test_room_goes_back_to_the_agents_after_a_finished_answer(launch, answers):
    provider = answers(
        (text(CUT), "max_tokens"),
        (echo_call("a"), "tool_use"),
        (text(FULL), "end_turn"),
    )
    run = launch()
    drive(run)
    assert [r.max_tokens for r in provider.requests] == [1024, 2048, 1024]
    assert run.status == Run.Status.SUCCEEDED


def test_a_refusal_fails_the_run_and_runs_nothing(launch, answers):
    harness.CALLS.clear()
    answers((text("I can't help with that.") + echo_call("x"), "refusal"))
    run = launch()
    drive(run)
    assert run.status == Run.Status.FAILED
    assert run.termination_reason == Run.Termination.REFUSED
    assert harness.CALLS["t_echo"] == 0 and run.output == ""


def test_a_paused_turn_is_sent_back_and_continued(launch, answers):
    paused = text("Searching the catalogue…")
    provider = answers((paused, "pause_turn"), (text(FULL), "end_turn"))
    run = launch()
    drive(run)
    assert (run.status, run.output) == (Run.Status.SUCCEEDED, FULL)
    assert provider.requests[1].messages[-1] == {"role": "assistant", "content": paused}


def test_a_stop_sequence_is_a_final_answer(launch, answers):
    answers((text(FULL), "stop_sequence"))
    run = launch()
    drive(run)
    assert (run.status, run.output) == (Run.Status.SUCCEEDED, FULL)


def test_an_unknown_stop_reason_fails_the_run(launch, answers):
    answers((text(FULL), "something_new"))
    run = launch()
    drive(run)
    assert run.status == Run.Status.FAILED
    assert run.termination_reason == Run.Termination.LLM_ERROR
    assert "something_new" in run.status_detail


def test_every_documented_stop_reason_has_an_outcome():
    documented = {"end_turn", "stop_sequence", "tool_use", "max_tokens", "pause_turn", "refusal"}
    handled = {*model.FINISHED, *model.CUT_OFF, model.PAUSED, model.REFUSED}
    assert documented <= handled
