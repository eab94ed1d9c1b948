"""AnthropicProvider through the real SDK and a real HTTP round trip to the fake API, driven
by the engine as a worker would drive it."""

import dataclasses
import time
from types import SimpleNamespace

import pytest

from agentkit.agents import CATALOGUE, get_agent, register
from agentkit.llm import LLMError, LLMRequest, LLMTransientError, Usage, pricing
from agentkit.llm.anthropic import AnthropicProvider, retry_after
from agentkit.verification import Verifier
from runs import engine
from runs.engine import retry
from runs.models import Run, Step
from tests.support.fake_messages_api import (
    Fault,
    bad_request,
    garbled,
    hang,
    malformed_tool_input,
    overloaded,
    rate_limited,
    reply,
    server_error,
    text,
    tool_use,
)

from .conftest import API_KEY

pytestmark = pytest.mark.django_db


def launch_analyst() -> Run:
    agent = get_agent("sql-analyst")
    data, errors = agent.validate_input(
        {"question": "Which tables are there?", "report_to": "analytics@example.com"}
    )
    assert not errors
    return engine.launch(agent=agent, input=data, provider="anthropic")


def steps(run: Run, kind: str) -> list[Step]:
    return list(run.steps.filter(kind=kind).order_by("seq"))


def test_tool_use_is_answered_with_its_tool_result_in_the_next_request(no_enqueue, fake_api):
    fake_api.push(
        reply(
            [text("Let me look at the schema."), tool_use("list_tables")],
            usage={"input_tokens": 1200, "output_tokens": 40, "cache_creation_input_tokens": 800},
        ),
        reply(
            [text("There are three tables.")],
            usage={"input_tokens": 300, "output_tokens": 20, "cache_read_input_tokens": 800},
        ),
    )
    run = launch_analyst()

    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED

    first, second = fake_api.messages_requests()
    assert first.headers["authorization"] == f"Bearer {API_KEY}"
    assert first.body["model"] == "claude-sonnet-4-6"
    [system] = first.body["system"]  # a block, to carry its cache breakpoint
    assert system["text"].startswith("You are a careful data analyst")
    assert system["cache_control"] == {"type": "ephemeral"}
    assert {t["name"] for t in first.body["tools"]} >= {"list_tables", "run_query"}
    assert all("input_schema" in t for t in first.body["tools"])
    assert "temperature" not in first.body
    assert first.body["messages"] == [
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": "Which tables are there?\n\n"
                    "E-mail the report to analytics@example.com.",
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        }
    ]
    llm_steps = steps(run, Step.Kind.LLM)
    tool_use_id = llm_steps[0].data["content"][1]["id"]
    assert tool_use_id.startswith("toolu_")
    assistant, results = second.body["messages"][1:]
    assert assistant == {"role": "assistant", "content": llm_steps[0].data["content"]}
    assert results["role"] == "user"
    [result] = results["content"]
    assert result["type"] == "tool_result" and result["tool_use_id"] == tool_use_id
    assert "customers" in result["content"] and "orders" in result["content"]
    assert not result.get("is_error")

    run.refresh_from_db()
    assert run.output == "There are three tables."
    first_usage = llm_steps[0].data["usage"]
    assert first_usage == {
        "input_tokens": 1200,
        "output_tokens": 40,
        "cache_creation_input_tokens": 800,
        "cache_read_input_tokens": 0,
    }
    assert llm_steps[1].data["usage"]["cache_read_input_tokens"] == 800
    # claude-sonnet-4: 3 USD/M in, 15 out, 3.75 cache write, 0.30 cache read.
    assert llm_steps[0].cost_usd == pricing.cost("claude-sonnet-4-6", Usage(1200, 40, 800))
    assert str(llm_steps[0].cost_usd) == "0.007200"
    assert str(llm_steps[1].cost_usd) == "0.001440"
    assert run.cost_usd == llm_steps[0].cost_usd + llm_steps[1].cost_usd
    # Input tokens include cache writes and reads, on the steps and on the run alike.
    assert [s.tokens_in for s in llm_steps] == [1200 + 800, 300 + 800]
    assert run.tokens_in == 1200 + 800 + 300 + 800 and run.tokens_out == 60
    for step in llm_steps:
        assert step.data["provider"] == "anthropic"
        assert step.data["request_id"].startswith("req_")
        assert step.latency_ms >= 10  # the fake's latency, measured around the real call
    [tool_step] = steps(run, Step.Kind.TOOL)
    assert tool_step.data["tool_use_id"] == tool_use_id and not tool_step.data["is_error"]


def test_rate_limit_and_overload_are_retried_honouring_retry_after(
    no_enqueue, fake_api, monkeypatch
):
    # (retry-after, seconds waited) of each retry, as the engine chose them.
    waits: list[tuple[float | None, float]] = []
    real_backoff = retry.backoff

    def recorded_backoff(attempt, **kwargs):
        delay = real_backoff(attempt, **kwargs)
        waits.append((kwargs.get("retry_after"), delay))
        return delay

    monkeypatch.setattr(retry, "backoff", recorded_backoff)
    fake_api.push(
        rate_limited(retry_after=0.4),
        reply([tool_use("list_tables")]),
        overloaded(),
        reply([text("Done.")]),
    )
    run = launch_analyst()

    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED

    requests = fake_api.messages_requests()
    assert len(requests) == 4
    # RETRY_BASE_SECONDS is 0.01 in tests: only the server's retry-after explains this wait.
    assert requests[1].received_at - requests[0].received_at >= 0.4
    # The 429's retry-after is the floor of its wait; the 529 had none, so it waited the
    # jittered backoff of a first attempt (at most RETRY_BASE_SECONDS).
    [(after_429, wait_429), (after_529, wait_529)] = waits
    assert after_429 == 0.4 and wait_429 >= 0.4
    assert after_529 is None and wait_529 <= 0.01
    errors = steps(run, Step.Kind.LLM_ERROR)
    assert [e.data["status"] for e in errors] == [429, 529]
    assert all(e.data["retryable"] and e.data["will_retry"] for e in errors)
    assert "rate_limit_error" in errors[0].data["error"]
    assert [s.data["stop_reason"] for s in steps(run, Step.Kind.LLM)] == ["tool_use", "end_turn"]
    run.refresh_from_db()
    assert run.retry_count == 2 and run.error_count == 2
    # A retried request is the same request: the pairing still holds after the 529.
    assert requests[3].body["messages"] == requests[2].body["messages"]


def test_server_error_is_retried(no_enqueue, fake_api):
    fake_api.push(server_error(), server_error(), reply([text("Done.")]))
    run = launch_analyst()

    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED

    assert [e.data["status"] for e in steps(run, Step.Kind.LLM_ERROR)] == [500, 500]
    assert fake_api.remaining == 0


def test_a_hung_call_times_out_and_is_retried(no_enqueue, fake_api, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "LLM_TIMEOUT_SECONDS": 0.5}
    fake_api.push(hang(), reply([text("Done.")]))
    run = launch_analyst()

    started = time.monotonic()
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED

    assert time.monotonic() - started >= 0.5  # the client waited out its timeout
    # One hung call, one retry that was answered.
    assert len(fake_api.messages_requests()) == 2 and fake_api.remaining == 0
    [error] = steps(run, Step.Kind.LLM_ERROR)
    assert "timed out after 0.5s" in error.data["error"]
    assert error.data["status"] is None and error.data["will_retry"]


def test_it_fails_with_llm_error_when_every_attempt_hangs(no_enqueue, fake_api, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "LLM_TIMEOUT_SECONDS": 0.3, "LLM_MAX_RETRIES": 2}
    fake_api.push(hang(), hang(), hang(), reply([text("never sent")]))
    run = launch_analyst()

    started = time.monotonic()
    assert engine.advance(run.pk, time_slice=30) == Run.Status.FAILED

    assert time.monotonic() - started >= 0.9  # three timeouts of 0.3 s were waited out
    assert len(fake_api.messages_requests()) == 3
    run.refresh_from_db()
    assert run.termination_reason == Run.Termination.LLM_ERROR
    assert "after 3 attempt(s)" in run.status_detail
    errors = steps(run, Step.Kind.LLM_ERROR)
    assert [e.data["will_retry"] for e in errors] == [True, True, False]
    assert all("timed out" in e.data["error"] for e in errors)
    assert fake_api.remaining == 1  # the reply after the third hang was never asked for
    assert steps(run, Step.Kind.LLM) == []


def test_a_garbled_response_is_an_error_step_and_is_retried(no_enqueue, fake_api):
    fake_api.push(garbled(), reply([text("Done.")]))
    run = launch_analyst()

    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED

    [error] = steps(run, Step.Kind.LLM_ERROR)
    assert "malformed response" in error.data["error"] and error.data["will_retry"]
    assert [s.data["content"] for s in steps(run, Step.Kind.LLM)] == [[text("Done.")]]


@pytest.mark.parametrize(
    "fault",
    [
        garbled(),
        garbled('{"id": "msg_1"}'),
        garbled("[1, 2]"),
        garbled('{"id": "msg_1", "content": [{"type": "te'),
        reply([{"type": "text"}]),
        reply([{"type": "tool_use", "id": "toolu_1", "input": {}}]),
        reply([{"text": "a block without a type"}]),
    ],
    ids=[
        "html",
        "no-usage",
        "list",
        "truncated",
        "text-without-text",
        "tool-without-name",
        "untyped",
    ],
)
def test_a_response_that_is_not_a_usable_message_is_a_transient_error(fake_api, fault):
    fake_api.push(fault)
    request = LLMRequest(
        model="claude-sonnet-4-6", system="", messages=[{"role": "user", "content": "hi"}], tools=[]
    )
    with pytest.raises(LLMTransientError, match="malformed response") as garbage:
        AnthropicProvider.from_settings().complete(request)
    assert garbage.value.status == 200


def test_unknown_block_types_are_kept_as_sent(fake_api):
    blocks = [
        {"type": "thinking", "thinking": "Let me see.", "signature": "c2ln"},
        {"type": "block_from_the_future", "payload": {"a": 1}},
        text("Hello."),
    ]
    fake_api.push(reply(blocks))
    request = LLMRequest(
        model="claude-sonnet-4-6", system="", messages=[{"role": "user", "content": "hi"}], tools=[]
    )
    response = AnthropicProvider.from_settings().complete(request)
    # The API wants thinking blocks back unchanged in the next request.
    assert response.content == blocks
    assert response.text == "Hello."


@pytest.mark.parametrize(
    "fault",
    [
        bad_request("messages.0.content: text content blocks must be non-empty"),
        Fault(401, "authentication_error", "invalid x-api-key"),
        Fault(403, "permission_error", "Your API key does not have permission"),
        Fault(404, "not_found_error", "model: claude-sonnet-4-6"),
    ],
    ids=lambda f: str(f.status),
)
def test_a_client_error_fails_the_run_at_once(no_enqueue, fake_api, fault):
    fake_api.push(fault, reply([text("never sent")]))
    run = launch_analyst()

    assert engine.advance(run.pk, time_slice=30) == Run.Status.FAILED

    assert len(fake_api.messages_requests()) == 1
    run.refresh_from_db()
    assert run.termination_reason == Run.Termination.LLM_ERROR
    [error] = steps(run, Step.Kind.LLM_ERROR)
    assert error.data["status"] == fault.status
    assert not error.data["retryable"] and not error.data["will_retry"]
    assert fault.message in error.data["error"]


def test_a_wrong_key_is_refused_and_not_retried(no_enqueue, fake_api, settings):
    fake_api.api_key = "sk-ant-the-right-one"
    run = launch_analyst()

    assert engine.advance(run.pk, time_slice=30) == Run.Status.FAILED

    [request] = fake_api.messages_requests()
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    [error] = steps(run, Step.Kind.LLM_ERROR)
    assert error.data["status"] == 401 and "authentication_error" in error.data["error"]


@pytest.mark.parametrize(
    ("bad_input", "message"),
    [
        ({"table": 42}, "table: Input should be a valid string"),
        ({}, "table: Field required"),
        ("not an object", "must be an object"),
        (["orders"], "must be an object"),
    ],
    ids=["wrong-type", "missing-field", "string", "list"],
)
def test_malformed_tool_input_becomes_an_error_result_and_the_run_goes_on(
    no_enqueue, fake_api, bad_input, message
):
    fake_api.push(
        malformed_tool_input("describe_table", input=bad_input),
        reply([tool_use("describe_table", table="orders")]),
        reply([text("Orders has a few columns.")]),
    )
    run = launch_analyst()

    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED

    first_llm = steps(run, Step.Kind.LLM)[0]
    bad_use = first_llm.data["content"][1]
    assert bad_use["input"] == bad_input  # the timeline keeps what the model sent
    bad_result, good_result = steps(run, Step.Kind.TOOL)
    assert bad_result.data["is_error"] and message in bad_result.data["error"]
    assert not good_result.data["is_error"]

    second = fake_api.messages_requests()[1]
    assistant, results = second.body["messages"][1:]
    replayed = assistant["content"][1]
    assert replayed["id"] == bad_use["id"]
    assert isinstance(replayed["input"], dict)  # the API refuses anything else
    [result] = results["content"]
    assert result["tool_use_id"] == bad_use["id"]
    assert result["is_error"] is True and message in result["content"]
    run.refresh_from_db()
    assert run.error_count == 1 and run.consecutive_errors == 0


def test_provider_round_trip_outside_the_engine(fake_api):
    fake_api.push(
        reply(
            [text("Thinking aloud."), tool_use("list_tables")],
            usage={"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 1000},
        )
    )
    provider = AnthropicProvider.from_settings()
    response = provider.complete(
        LLMRequest(
            model="claude-haiku-4-5",
            system="",
            messages=[{"role": "user", "content": "hi"}],
            tools=[],
            max_tokens=64,
        )
    )
    [request] = fake_api.messages_requests()
    assert "system" not in request.body and "tools" not in request.body
    assert request.body["max_tokens"] == 64
    assert response.stop_reason == "tool_use"
    assert response.text == "Thinking aloud."
    assert response.tool_uses[0]["name"] == "list_tables" and response.tool_uses[0]["input"] == {}
    assert response.usage.cache_read_input_tokens == 1000
    # haiku 4: 1 USD/M in, 5 out, 0.10 cache read -> 10e-6 + 25e-6 + 100e-6
    assert str(response.cost_usd) == "0.000135"
    assert response.model == "claude-haiku-4-5"


def test_errors_carry_status_and_retry_after(fake_api):
    fake_api.push(rate_limited(retry_after=7), overloaded(), bad_request())
    provider = AnthropicProvider.from_settings()
    request = LLMRequest(
        model="claude-sonnet-4-6", system="", messages=[{"role": "user", "content": "hi"}], tools=[]
    )
    with pytest.raises(LLMTransientError) as limited:
        provider.complete(request)
    assert (limited.value.status, limited.value.retry_after) == (429, 7.0)
    with pytest.raises(LLMTransientError) as busy:
        provider.complete(request)
    assert (busy.value.status, busy.value.retry_after) == (529, None)
    with pytest.raises(LLMError) as bad:
        provider.complete(request)
    assert bad.value.status == 400 and not bad.value.retryable


def test_connection_refused_is_transient(settings):
    from tests.support.fake_messages_api import FakeMessagesServer

    with FakeMessagesServer() as server:
        base_url = server.base_url  # a port that was free a moment ago, now closed
    settings.ANTHROPIC_API_KEY = API_KEY
    settings.ANTHROPIC_BASE_URL = base_url
    provider = AnthropicProvider.from_settings()
    request = LLMRequest(
        model="claude-sonnet-4-6", system="", messages=[{"role": "user", "content": "hi"}], tools=[]
    )
    with pytest.raises(LLMTransientError) as refused:
        provider.complete(request)
    assert refused.value.status is None and "could not reach" in str(refused.value)


def test_without_a_key_the_call_fails_clearly(settings):
    settings.ANTHROPIC_API_KEY = ""
    provider = AnthropicProvider.from_settings()
    request = LLMRequest(
        model="claude-sonnet-4-6", system="", messages=[{"role": "user", "content": "hi"}], tools=[]
    )
    with pytest.raises(LLMError, match="ANTHROPIC_API_KEY is not set") as missing:
        provider.complete(request)
    assert not missing.value.retryable


def test_the_sdks_opentelemetry_spans_are_off_unless_asked_for(settings, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_OPEN_TELEMETRY", raising=False)
    settings.ANTHROPIC_API_KEY = API_KEY
    assert AnthropicProvider.from_settings().client.open_telemetry["traces"]["enabled"] is False
    settings.ANTHROPIC_OPEN_TELEMETRY = True
    # Then the SDK's default (on) and its environment apply.
    assert AnthropicProvider.from_settings().client.open_telemetry["traces"]["enabled"] is True
    monkeypatch.setenv("ANTHROPIC_OPEN_TELEMETRY", "false")
    provider = AnthropicProvider(api_key=API_KEY, base_url="http://other", traces=True)
    assert provider.client.open_telemetry["traces"]["enabled"] is False


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "3"}, 3.0),
        ({"retry-after": "0.25"}, 0.25),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after_header_parsing(headers, expected):
    assert retry_after(headers) == expected


def test_retry_after_as_http_date(monkeypatch):
    from email.utils import formatdate

    from agentkit.llm import anthropic as module

    # A fixed clock: the answer does not depend on how long the test takes to get there.
    now = 1_750_000_000.0
    monkeypatch.setattr(module, "time", SimpleNamespace(time=lambda: now))
    assert retry_after({"retry-after": formatdate(now + 10, usegmt=True)}) == 10
    assert retry_after({"retry-after": formatdate(now - 10, usegmt=True)}) == 0


def test_a_model_verifier_is_a_plain_messages_call_through_the_sdk(no_enqueue, fake_api):
    analyst = get_agent("sql-analyst")
    register(
        dataclasses.replace(
            analyst, verifier=Verifier(prompt="Check the answer.", model="claude-haiku-4-5")
        )
    )
    try:
        fake_api.push(
            reply([text("There are two tables.")]),
            reply([text("FAIL: there are three")]),
            reply([text("There are three tables.")]),
            reply([text("PASS")]),
        )
        run = launch_analyst()
        assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    finally:
        CATALOGUE["sql-analyst"] = analyst
    _, review, again, _ = fake_api.messages_requests()
    assert review.body["model"] == "claude-haiku-4-5" and "tools" not in review.body
    assert review.body["system"].startswith("Check the answer.")
    assert "There are two tables." in review.body["messages"][0]["content"]
    assert "metadata" not in review.body  # the engine's own, never sent
    assert again.body["messages"][-1]["content"][-1]["text"].startswith(
        "Your answer did not pass verification (model review, attempt 1 of 2): there are three"
    )
    run.refresh_from_db()
    assert run.output == "There are three tables."
    verifies = steps(run, Step.Kind.VERIFY)
    assert [v.data["passed"] for v in verifies] == [False, True] and verifies[0].cost_usd > 0
