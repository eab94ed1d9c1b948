"""The order-briefing demo agent: with the scripted model and no API key, its briefing is
typed into the live trace as drafts before its step exists."""

import time

import pytest

from agentkit.agents import get_agent
from agentkit.llm.scripted import ScriptedProvider
from runs import engine, events
from runs.engine.drafts import DRAFT_INTERVAL_SECONDS
from runs.models import Run, Step

pytestmark = pytest.mark.django_db


def test_the_briefing_is_drafted_while_it_is_written_then_recorded(
    operator, no_enqueue, monkeypatch
):
    agent = get_agent("order-briefing")
    assert agent.stream_text and agent.snapshot()["stream_text"] is True
    provider = agent.scripted_provider({"order_id": 42, "audience": "the support team"})
    assert isinstance(provider, ScriptedProvider) and provider.typing == agent.scripted_typing > 0
    drafts: list[tuple[int, str]] = []
    monkeypatch.setattr(
        events, "publish_draft", lambda run_id, seq, text, omitted=0: drafts.append((seq, text))
    )
    data, errors = agent.validate_input({"order_id": 42, "audience": "the support team"})
    assert not errors
    run = engine.launch(agent=agent, input=data, launched_by=operator, provider="scripted")

    started = time.monotonic()
    assert engine.advance(run.pk, time_slice=60) == Run.Status.SUCCEEDED
    seconds = time.monotonic() - started

    run.refresh_from_db()
    briefing = run.steps.filter(kind=Step.Kind.LLM).order_by("seq").last()
    assert run.output.startswith("Briefing on order 42 for the support team.")
    briefing_drafts = [text for seq, text in drafts if seq == briefing.seq]
    # Typed over seconds, at most a few drafts a second: far fewer than its words.
    assert seconds > 3
    assert 5 < len(briefing_drafts) <= seconds / DRAFT_INTERVAL_SECONDS + 2
    assert len(briefing_drafts) < len(run.output.split()) / 3
    assert briefing_drafts[-1] == run.output
