"""Streaming model text (Agent.stream_text): while the model writes, drafts of its text are
published to the run's viewers, throttled, each with the seq its step will have; the timeline
keeps the model's step only."""

import dataclasses
import itertools
import time

import pytest

from agentkit.agents import register
from agentkit.llm import LLMTransientError
from agentkit.llm.scripted import text, tool_use
from runs import engine, events
from runs.engine import drafts
from runs.models import Run, Step

from .. import harness

pytestmark = pytest.mark.django_db

LONG = " ".join(f"word{i}" for i in range(400))


@pytest.fixture
def published(monkeypatch) -> list[dict]:
    """Every draft the engine publishes, as (seq, text, omitted)."""
    sent: list[dict] = []
    monkeypatch.setattr(
        events,
        "publish_draft",
        lambda run_id, seq, text, omitted=0: sent.append(
            {"run_id": str(run_id), "seq": seq, "text": text, "omitted": omitted}
        ),
    )
    return sent


@pytest.fixture
def streaming(test_agent, no_enqueue):
    """The test agent with stream_text, launched like `launch`."""
    agent = register(dataclasses.replace(test_agent, stream_text=True))

    def make() -> Run:
        return engine.launch(agent=agent, input={"task": "t", "script": ""}, provider="scripted")

    return make


def test_a_long_answer_is_published_as_few_drafts_then_the_step(streaming, script, published):
    # 400 words a few ms apart: a draft per word would be 400 messages.
    script([[text(LONG)]], typing=0.005)
    run = streaming()

    started = time.monotonic()
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    seconds = time.monotonic() - started  # slower than 400 x 5 ms on a busy machine

    llm_step = run.steps.get(kind=Step.Kind.LLM)
    assert {d["seq"] for d in published} == {llm_step.seq}
    # The first word at once, then at most one every DRAFT_INTERVAL_SECONDS, and the whole.
    assert published[0]["text"] == "word0"
    assert 3 <= len(published) <= seconds / drafts.DRAFT_INTERVAL_SECONDS + 2
    assert published[-1]["text"] == LONG
    texts = [d["text"] for d in published]
    assert all(b.startswith(a) for a, b in itertools.pairwise(texts))
    # The timeline has no draft: the model's step holds the text.
    kinds = list(run.steps.order_by("seq").values_list("kind", flat=True))
    assert kinds == ["status", "status", "llm", "status"]  # launched, started, llm, ended
    assert llm_step.data["content"] == [{"type": "text", "text": LONG}]


def test_each_model_call_drafts_under_its_own_seq(streaming, script, published):
    script([[text("Let me echo."), tool_use("t_echo", text="x")], [text("Echoed.")]])
    run = streaming()

    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED

    llm_seqs = list(run.steps.filter(kind="llm").order_by("seq").values_list("seq", flat=True))
    assert [(d["seq"], d["text"]) for d in published] == [
        (llm_seqs[0], "Let"),
        (llm_seqs[0], "Let me echo."),
        (llm_seqs[1], "Echoed."),
    ]


def test_an_answer_without_text_publishes_no_draft(streaming, script, published):
    script([[tool_use("t_echo", text="x")], [text("")]])
    run = streaming()

    engine.advance(run.pk, time_slice=30)

    assert published == []


def test_an_agent_that_does_not_stream_publishes_nothing_and_is_not_asked_to(
    launch, script, published
):
    provider = script([[text(LONG)]])
    seen = []
    inner = provider.inner.complete
    provider.inner.complete = lambda request, **kw: seen.append(kw) or inner(request, **kw)
    run = launch()

    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED

    assert published == []
    assert seen == [{"on_text": None}]  # the plain call, as before


class BreaksMidAnswer:
    """Writes some text, then the connection breaks; the next attempt answers."""

    name = "scripted"

    def __init__(self):
        self.calls = 0

    def complete(self, request, *, on_text=None):
        self.calls += 1
        if self.calls == 1:
            on_text("Half an ans")
            raise LLMTransientError("the model API's stream broke off")
        return harness.ScriptedProvider([[text("A whole answer.")]]).complete(
            request, on_text=on_text
        )


def test_an_error_mid_stream_is_an_error_step_under_the_drafts_seq_and_is_retried(
    streaming, published, monkeypatch, settings
):
    settings.AGENTOPS = {**settings.AGENTOPS, "RETRY_BASE_SECONDS": 0.001}
    monkeypatch.setattr("agentkit.agents.provider_for_run", lambda run: BreaksMidAnswer())
    run = streaming()

    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED

    error = run.steps.get(kind=Step.Kind.LLM_ERROR)
    answer = run.steps.get(kind=Step.Kind.LLM)
    # The broken draft's seq went to the error step (the page drops the draft when it
    # arrives); the retry drafts under the next seq.
    assert published[0] == {
        "run_id": str(run.pk),
        "seq": error.seq,
        "text": "Half an ans",
        "omitted": 0,
    }
    assert {d["seq"] for d in published[1:]} == {answer.seq} and answer.seq == error.seq + 1
    assert published[-1]["text"] == "A whole answer."
    assert answer.data["content"] == [{"type": "text", "text": "A whole answer."}]


def test_a_very_long_draft_carries_its_end(streaming, script, published, monkeypatch):
    monkeypatch.setattr(drafts, "DRAFT_MAX_CHARS", 100)
    script([[text(LONG)]])
    run = streaming()

    engine.advance(run.pk, time_slice=30)

    last = published[-1]
    assert last["text"] == LONG[-100:] and last["omitted"] == len(LONG) - 100


def test_drafts_reach_the_run_group_as_live_events(monkeypatch):
    sent = []
    monkeypatch.setattr(
        events, "send", lambda group, message, **kw: sent.append((group, message, kw))
    )

    events.publish_draft("r1", 7, "Hello", omitted=0)

    [(group, message, kw)] = sent
    assert group == events.run_group("r1")
    assert message == {"type": "run.draft", "run_id": "r1", "seq": 7, "text": "Hello", "omitted": 0}
    assert kw["merge_key"] == ("draft", "r1", 7)


def test_a_draft_that_cannot_be_published_does_not_fail_the_model_call(
    streaming, script, monkeypatch
):
    def broken(*args, **kwargs):
        raise RuntimeError("channel layer misconfigured")

    monkeypatch.setattr(events, "publish_draft", broken)
    script([[text(LONG)]])
    run = streaming()

    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    assert run.steps.filter(kind=Step.Kind.LLM_ERROR).count() == 0
