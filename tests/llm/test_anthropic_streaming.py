"""AnthropicProvider streaming (an `on_text` callback) through the real SDK and the fake API's
server-sent events: the same response as a plain call, the text handed over as it comes, and
errors mid-stream mapped as the plain call's are."""

import dataclasses

import pytest

from agentkit.agents import CATALOGUE, get_agent, register
from agentkit.llm import LLMError, LLMRequest, LLMTransientError, Usage, pricing
from agentkit.llm.anthropic import AnthropicProvider
from runs import engine, events
from runs.models import Run, Step
from tests.support.fake_messages_api import (
    Fault,
    bad_request,
    broken_stream,
    error_mid_stream,
    overloaded,
    reply,
    text,
    tool_use,
    truncated_stream,
)

LONG = "The orders table holds one row per order; " * 20


def request() -> LLMRequest:
    return LLMRequest(
        model="claude-haiku-4-5",
        system="You are terse.",
        messages=[{"role": "user", "content": "Which tables?"}],
        tools=[{"name": "lookup", "description": "", "input_schema": {"type": "object"}}],
    )


def answer(usage: dict | None = None):
    block = tool_use("lookup", table="orders", filters={"status": ["open", "late"]})
    return reply([text(LONG), block], usage=usage or {})


def test_a_streamed_answer_equals_the_plain_one(fake_api):
    usage = {"input_tokens": 1500, "output_tokens": 321, "cache_read_input_tokens": 700}
    fake_api.push(answer(usage), answer(usage))
    provider = AnthropicProvider.from_settings()
    pieces: list[str] = []

    plain = provider.complete(request())
    streamed = provider.complete(request(), on_text=pieces.append)

    assert fake_api.messages_requests()[1].body["stream"] is True
    assert "stream" not in fake_api.messages_requests()[0].body
    # Each block as the plain call gives it; only the tool call's id differs (fresh per reply).
    assert streamed.content[0] == plain.content[0] == {"type": "text", "text": LONG}
    assert {**streamed.content[1], "id": "x"} == {**plain.content[1], "id": "x"}
    assert streamed.content[1]["input"] == {
        "table": "orders",
        "filters": {"status": ["open", "late"]},
    }
    assert streamed.stop_reason == plain.stop_reason == "tool_use"
    assert streamed.usage == plain.usage
    assert streamed.usage.output_tokens == 321 and streamed.usage.cache_read_input_tokens == 700
    assert streamed.cost_usd == plain.cost_usd == pricing.cost("claude-haiku-4-5", plain.usage)
    assert streamed.request_id.startswith("req_") and streamed.request_id != plain.request_id
    assert streamed.extra["message_id"].startswith("msg_")
    # The text came in pieces, in order; the tool call's arguments did not stream.
    assert len(pieces) > 10
    assert "".join(pieces) == LONG


def test_an_answer_without_text_hands_over_nothing(fake_api):
    fake_api.push(reply([tool_use("lookup")]))
    pieces: list[str] = []

    response = AnthropicProvider.from_settings().complete(request(), on_text=pieces.append)

    assert pieces == []
    assert response.tool_uses[0]["input"] == {}


@pytest.mark.parametrize("fault", [broken_stream, error_mid_stream, truncated_stream])
def test_a_stream_that_breaks_is_a_transient_error(fake_api, fault):
    fake_api.push(fault([text(LONG)], after=5))
    pieces: list[str] = []

    with pytest.raises(LLMTransientError):
        AnthropicProvider.from_settings().complete(request(), on_text=pieces.append)

    # Some text was handed over before the break: the engine's draft, which it discards.
    assert pieces and len("".join(pieces)) < len(LONG)


def test_an_error_event_mid_stream_says_what_the_api_said(fake_api):
    fake_api.push(error_mid_stream([text(LONG)], after=4))

    with pytest.raises(LLMTransientError, match="overloaded_error"):
        AnthropicProvider.from_settings().complete(request(), on_text=lambda _: None)


def test_errors_before_the_stream_are_mapped_as_a_plain_calls(fake_api):
    fake_api.push(overloaded(), bad_request("messages: too long"))
    provider = AnthropicProvider.from_settings()

    with pytest.raises(LLMTransientError) as transient:
        provider.complete(request(), on_text=lambda _: None)
    with pytest.raises(LLMError) as client_error:
        provider.complete(request(), on_text=lambda _: None)

    assert transient.value.status == 529
    assert client_error.value.status == 400 and not client_error.value.retryable


def test_a_stream_that_trickles_past_the_deadline_times_out(fake_api, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "LLM_TIMEOUT_SECONDS": 0.5}
    fake_api.stream_delay = 0.05  # each piece well within the read timeout, the whole not
    fake_api.push(reply([text(LONG)]))

    with pytest.raises(LLMTransientError, match="timed out"):
        AnthropicProvider.from_settings().complete(request(), on_text=lambda _: None)


def test_a_stream_that_is_not_events_is_a_transient_error(fake_api):
    garbage = "event: message_start\ndata: {not json\n\n"
    fake_api.push(
        Fault(200, "", "", headers={"content-type": "text/event-stream"}, raw_body=garbage)
    )

    with pytest.raises(LLMTransientError, match="malformed"):
        AnthropicProvider.from_settings().complete(request(), on_text=lambda _: None)


@pytest.mark.django_db
def test_an_agent_with_stream_text_drafts_through_the_sdk_and_records_the_same_step(
    no_enqueue, fake_api, monkeypatch, operator
):
    drafts: list[tuple[int, str]] = []
    monkeypatch.setattr(
        events, "publish_draft", lambda run_id, seq, text, omitted=0: drafts.append((seq, text))
    )
    fake_api.stream_delay = 0.002
    fake_api.push(reply([text(LONG)], usage={"input_tokens": 900, "output_tokens": 300}))
    base = get_agent("order-briefing")
    agent = register(dataclasses.replace(base, slug="streaming-anthropic", tools=()))
    try:
        run = engine.launch(
            agent=agent,
            input={"order_id": 1, "audience": "ops"},
            launched_by=operator,
            provider="anthropic",
        )
        assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    finally:
        CATALOGUE.pop("streaming-anthropic", None)

    step = run.steps.get(kind=Step.Kind.LLM)
    assert fake_api.messages_requests()[0].body["stream"] is True
    assert step.data["content"] == [{"type": "text", "text": LONG}]
    assert step.data["usage"]["output_tokens"] == 300 and step.data["request_id"].startswith("req_")
    assert step.tokens_in == 900 and step.cost_usd == pricing.cost(
        "claude-sonnet-4-6", Usage(**step.data["usage"])
    )
    assert {seq for seq, _ in drafts} == {step.seq}
    assert 2 <= len(drafts) < 50 and drafts[-1][1] == LONG
