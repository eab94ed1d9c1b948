"""Prompt caching: the request's breakpoints (agentkit/llm/anthropic.py), the fake API's cache
(prefix hashes, as the real API), the price of reads and writes and what caching saved, per
step and per agent and day."""

import copy
import time
from decimal import Decimal
from types import SimpleNamespace

import pytest

from agentkit.agents import get_agent
from agentkit.llm import LLMRequest, LLMResponse, Usage, pricing
from agentkit.llm.anthropic import AnthropicProvider, cache_breakpoints
from runs import costs, engine
from runs.engine import owned
from runs.models import AgentDaySpend, Run, Step
from runs.rendering import step_view
from tests.runs.factories import make_run
from tests.support.fake_messages_api import reply, text, tool_use

EPHEMERAL = {"type": "ephemeral"}


def marks(params: dict) -> list[str]:
    """Where the breakpoints are: "tool:<name>", "system", "message:<index>"."""
    found = [f"tool:{t['name']}" for t in params.get("tools") or [] if "cache_control" in t]
    found += ["system" for b in params.get("system") or [] if "cache_control" in b]
    for i, m in enumerate(params["messages"]):
        if isinstance(m["content"], list) and any("cache_control" in b for b in m["content"]):
            found.append(f"message:{i}")
    return found


def conversation(turns: int) -> list[dict]:
    messages = [{"role": "user", "content": "Look up the orders."}]
    for i in range(turns):
        messages.append(
            {
                "role": "assistant",
                "content": [{**tool_use("lookup_order", order_id=i), "id": f"t{i}"}],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "ok"}],
            }
        )
    return messages


TOOLS = [{"name": n, "description": n, "input_schema": {"type": "object"}} for n in ("a", "b")]


# --- where the breakpoints go ----------------------------------------------------------------
def test_the_stable_prefix_is_marked_with_at_most_four_breakpoints():
    params = {"model": "m", "system": "Be brief.", "tools": TOOLS, "messages": conversation(3)}
    before = copy.deepcopy(params)
    marked = cache_breakpoints(params)
    # Tools, system, the user message the previous call ended with, and the last one.
    assert marks(marked) == ["tool:b", "system", "message:4", "message:6"]
    assert marked["system"] == [{"type": "text", "text": "Be brief.", "cache_control": EPHEMERAL}]
    assert marked["messages"][6]["content"][-1]["cache_control"] == EPHEMERAL
    assert params == before  # the engine's conversation is left as it was


def test_a_first_turn_marks_its_only_message_and_text_becomes_a_block():
    marked = cache_breakpoints({"model": "m", "messages": conversation(0)})
    assert marks(marked) == ["message:0"]
    assert marked["messages"][0]["content"] == [
        {"type": "text", "text": "Look up the orders.", "cache_control": EPHEMERAL}
    ]


def test_the_previous_calls_breakpoint_is_repeated_so_the_next_call_reads_it():
    first = cache_breakpoints({"model": "m", "tools": TOOLS, "messages": conversation(1)})
    second = cache_breakpoints({"model": "m", "tools": TOOLS, "messages": conversation(2)})
    assert marks(first)[-1] == "message:2" and "message:2" in marks(second)


# --- the fake API's cache, as the real one --------------------------------------------------
def ask(provider: AnthropicProvider, messages: list[dict], system: str) -> Usage:
    return provider.complete(
        LLMRequest(
            model="claude-sonnet-4-6", system=system, messages=messages, tools=TOOLS, max_tokens=64
        )
    ).usage


def test_a_repeated_prefix_is_read_from_the_cache(fake_api, settings):
    fake_api.cache_min_tokens = 100
    provider = AnthropicProvider.from_settings()
    system = "You look up orders. " * 60  # about 300 tokens
    first = ask(provider, conversation(0), system)
    assert first.cache_read_input_tokens == 0 and first.cache_creation_input_tokens > 300
    second = ask(provider, conversation(1), system)
    # The whole first request is read back; only the new turn is written.
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens
    assert 0 < second.cache_creation_input_tokens < first.cache_creation_input_tokens
    assert second.cache_read_input_tokens > 4 * second.input_tokens  # the envelope is left
    # Another system prompt: nothing of the prefix matches after the tools, which are
    # too short to be cached alone.
    other = ask(provider, conversation(1), "Something else entirely. " * 60)
    assert other.cache_read_input_tokens == 0


def test_a_prefix_under_the_minimum_is_not_cached(fake_api):
    provider = AnthropicProvider.from_settings()  # the fake's minimum: 1024 tokens
    ask(provider, conversation(0), "Short.")
    usage = ask(provider, conversation(1), "Short.")
    assert usage.cache_read_input_tokens == usage.cache_creation_input_tokens == 0


def test_without_caching_nothing_is_marked(fake_api, settings):
    settings.ANTHROPIC_PROMPT_CACHING = False
    fake_api.cache_min_tokens = 1
    provider = AnthropicProvider.from_settings()
    ask(provider, conversation(1), "Be brief.")
    [request] = fake_api.messages_requests()
    assert request.body["system"] == "Be brief." and marks(request.body) == []


def ask_for_an_hour(provider: AnthropicProvider, messages: list[dict], system: str) -> Usage:
    request = LLMRequest(
        model="claude-sonnet-4-6",
        system=system,
        messages=messages,
        tools=TOOLS,
        max_tokens=64,
        metadata={"cache_ttl": "1h"},
    )
    return provider.complete(request).usage


def test_an_agent_may_keep_its_prefix_an_hour_priced_as_such(fake_api):
    # Runs that wait on people for longer than five minutes would write the whole
    # conversation again when they resume; an hour's entry is still there.
    fake_api.cache_min_tokens = 100
    provider = AnthropicProvider.from_settings()
    system = "You look up orders. " * 60
    first = ask_for_an_hour(provider, conversation(0), system)
    [request] = fake_api.messages_requests()
    assert request.body["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert first.cache_creation_1h_input_tokens == first.cache_creation_input_tokens > 300
    assert min(fake_api.cache.values()) > time.monotonic() + 3000  # kept an hour, not 5 min
    # Priced 2x an input token, not 1.25x; what caching saved counts that premium.
    model = "claude-sonnet-4-6"
    inp, _, write_5m, _ = pricing.prices_for(model)
    written = first.cache_creation_input_tokens
    five_minutes = Usage(first.input_tokens, first.output_tokens, written, 0)
    assert pricing.cost(model, first) - pricing.cost(model, five_minutes) == (
        written * (2 * inp - write_5m) / pricing.M
    ).quantize(Decimal("0.000001"))
    assert pricing.cache_savings(model, first) == (-written * inp / pricing.M).quantize(
        Decimal("0.000001")
    )
    second = ask_for_an_hour(provider, conversation(1), system)
    assert second.cache_read_input_tokens == written
    assert first.as_dict()["cache_creation_1h_input_tokens"] == written
    assert "cache_creation_1h_input_tokens" not in five_minutes.as_dict()  # the usual shape


def test_an_hours_breakpoint_after_a_five_minutes_one_is_refused_as_the_api_does(fake_api):
    import anthropic

    client = AnthropicProvider.from_settings().client
    content = [
        {"type": "text", "text": "a", "cache_control": EPHEMERAL},
        {"type": "text", "text": "b", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
    ]
    with pytest.raises(anthropic.BadRequestError, match="must not come after"):
        client.messages.create(
            model="claude-sonnet-4-6",
            max_tokens=10,
            messages=[{"role": "user", "content": content}],
        )


def test_more_than_four_breakpoints_are_refused_as_the_api_does(fake_api):
    import anthropic

    client = AnthropicProvider.from_settings().client
    content = [{"type": "text", "text": f"part {i}", "cache_control": EPHEMERAL} for i in range(5)]
    with pytest.raises(anthropic.BadRequestError, match="A maximum of 4 blocks"):
        client.messages.create(
            model="claude-sonnet-4-6",
            max_tokens=10,
            messages=[{"role": "user", "content": content}],
        )


# --- prices -----------------------------------------------------------------------------------
def test_cache_writes_cost_a_quarter_more_and_reads_a_tenth():
    # claude-sonnet-4: 3 USD per million input tokens.
    assert pricing.cost("claude-sonnet-4-5", Usage(cache_creation_input_tokens=10**6)) == Decimal(
        "3.75"
    )
    assert pricing.cost("claude-sonnet-4-5", Usage(cache_read_input_tokens=10**6)) == Decimal(
        "0.30"
    )
    read = Usage(input_tokens=100, cache_read_input_tokens=10**6)
    assert pricing.cache_savings("claude-sonnet-4-5", read) == Decimal("2.70")
    written = Usage(cache_creation_input_tokens=10**6)
    assert pricing.cache_savings("claude-sonnet-4-5", written) == Decimal("-0.75")
    assert pricing.cache_savings("claude-sonnet-4-5", Usage(input_tokens=500)) == 0


# --- a run through the engine ---------------------------------------------------------------
@pytest.mark.django_db
def test_a_runs_steps_record_what_the_cache_read_wrote_and_saved(no_enqueue, fake_api):
    fake_api.cache_min_tokens = 100
    fake_api.push(
        reply([text("Tables first."), tool_use("list_tables")]),
        reply([text("Now the schema."), tool_use("describe_table", table="orders")]),
        reply([text("Three tables.")]),
    )
    agent = get_agent("sql-analyst")
    data, _ = agent.validate_input(
        {"question": "Which tables are there?", "report_to": "analytics@example.com"}
    )
    run = engine.launch(agent=agent, input=data, provider="anthropic")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED

    steps = list(run.steps.filter(kind=Step.Kind.LLM).order_by("seq"))
    usages = [Usage(**s.data["usage"]) for s in steps]
    assert usages[0].cache_read_input_tokens == 0 and usages[0].cache_creation_input_tokens > 0
    assert all(u.cache_read_input_tokens > 0 for u in usages[1:])
    for step, usage in zip(steps, usages, strict=True):
        assert step.cost_usd == pricing.cost("claude-sonnet-4-6", usage)
        assert Decimal(step.data["cache_saved_usd"]) == pricing.cache_savings(
            "claude-sonnet-4-6", usage
        )
        assert step.tokens_in == usage.total_input_tokens
    # The timeline says so beside the tokens.
    facts = dict(step_view(steps[1]).facts)
    assert facts["cache"] == (
        f"{usages[1].cache_read_input_tokens} read / {usages[1].cache_creation_input_tokens} "
        f"written, saved ${steps[1].data['cache_saved_usd']}"
    )
    saved = sum((Decimal(s.data["cache_saved_usd"]) for s in steps), Decimal(0))
    assert saved > 0  # the reads saved more than the writes' premium cost

    # Added up per agent and day by the database, as the dashboard and the API read them.
    spent = costs.cost_by_agent(agent="sql-analyst").total
    assert spent.cache_read_tokens == sum(u.cache_read_input_tokens for u in usages)
    assert spent.cache_write_tokens == sum(u.cache_creation_input_tokens for u in usages)
    assert spent.cache_saved_usd == saved
    assert AgentDaySpend.objects.filter(agent="sql-analyst").count() == 1


@pytest.mark.django_db
def test_a_discarded_answers_cache_writes_count_in_the_runs_tokens(operator, no_enqueue):
    # An answer that came back after its run was cancelled is charged to the run alone.
    run = make_run(operator)
    answer = LLMResponse(
        content=[],
        stop_reason="end_turn",
        usage=Usage(10, 5, cache_creation_input_tokens=100, cache_read_input_tokens=200),
        model="claude-sonnet-4-6",
        cost_usd=Decimal("0.001"),
    )
    owned.charge_discarded(SimpleNamespace(run=run), answer)
    run.refresh_from_db()
    assert (run.tokens_in, run.tokens_out, run.cost_usd) == (310, 5, Decimal("0.001"))
