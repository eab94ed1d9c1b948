"""An agent's fallback model through the real SDK and the fake API: a 529, or an
overloaded_error event mid-stream, hands the call to the fallback model at once."""

import dataclasses

import pytest

from agentkit.agents import CATALOGUE, get_agent, register
from runs import engine
from runs.models import Run, Step
from tests.support.fake_messages_api import error_mid_stream, overloaded, reply, text

pytestmark = pytest.mark.django_db

FALLBACK = "claude-haiku-4-5"


@pytest.fixture
def analyst_with_fallback():
    analyst = get_agent("sql-analyst")

    def make(**changes) -> Run:
        agent = register(dataclasses.replace(analyst, fallback_model=FALLBACK, **changes))
        data, errors = agent.validate_input(
            {"question": "Which tables are there?", "report_to": "analytics@example.com"}
        )
        assert not errors
        return engine.launch(agent=agent, input=data, provider="anthropic")

    yield make
    CATALOGUE["sql-analyst"] = analyst


def test_a_529_is_answered_by_the_fallback_model(no_enqueue, fake_api, analyst_with_fallback):
    fake_api.push(overloaded(), reply([text("Three tables.")]))
    run = analyst_with_fallback()
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    assert [r.body["model"] for r in fake_api.messages_requests()] == [
        "claude-sonnet-4-6",
        FALLBACK,
    ]
    step = run.steps.get(kind=Step.Kind.LLM)
    assert step.data["model"] == FALLBACK and step.data["fallback_from"] == "claude-sonnet-4-6"
    error = run.steps.get(kind=Step.Kind.LLM_ERROR)
    assert error.data["status"] == 529 and error.data["fallback_to"] == FALLBACK


def test_an_overloaded_stream_is_answered_by_the_fallback_model(
    no_enqueue, fake_api, analyst_with_fallback
):
    fake_api.push(error_mid_stream([text("Counting the tables")]), reply([text("Three.")]))
    run = analyst_with_fallback(stream_text=True)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    first, second = fake_api.messages_requests()
    assert first.body["stream"] is True and second.body["model"] == FALLBACK
    assert run.steps.get(kind=Step.Kind.LLM).data["model"] == FALLBACK
    run.refresh_from_db()
    assert run.output == "Three."
