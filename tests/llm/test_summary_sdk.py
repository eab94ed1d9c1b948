"""A context summary through the real SDK and the fake Messages API: the summarisation call is
a valid request of its own (no tools), and the next turn is sent the summarised conversation."""

import itertools

import pytest

from agentkit.agents import get_agent
from runs import engine
from runs.engine.conversation import SUMMARY_MARK
from runs.models import Run, Step
from tests.support.fake_messages_api import reply, text, tool_use

pytestmark = pytest.mark.django_db


def test_the_summary_is_its_own_call_and_the_next_turn_gets_it(no_enqueue, fake_api):
    turns = itertools.count()

    def answer(body: dict):
        if not body.get("tools"):  # the summarisation call
            return reply([text("Orders 40 to 43 looked up; none refunded.")])
        n = next(turns)
        if n < 8:
            return reply([tool_use("lookup_order", order_id=40 + n)])
        return reply([text("No refunds needed.")])

    fake_api.push(*[answer] * 12)
    agent = get_agent("order-review")
    data, _ = agent.validate_input({"first_order": 40, "count": 8})
    run = engine.launch(agent=agent, input=data, provider="anthropic")

    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED

    requests = fake_api.messages_requests()
    summary_calls = [r for r in requests if not r.body.get("tools")]
    assert summary_calls, "no summarisation call"
    body = summary_calls[0].body
    assert body["system"].startswith("You summarise") and body["max_tokens"] == 1024
    assert body["model"] == "claude-haiku-4-5"  # the agent's cheaper model for summaries
    assert [m["role"] for m in body["messages"]] == ["user"]
    [summary] = Step.objects.filter(run=run, kind=Step.Kind.SUMMARY)
    assert summary.data["summary"] == "Orders 40 to 43 looked up; none refunded."
    assert summary.data["provider"] == "anthropic" and summary.cost_usd > 0
    after = requests[requests.index(summary_calls[0]) + 1].body["messages"]
    assert after[0]["content"][0]["text"] == "Review orders 40 to 47, one by one."
    assert after[0]["content"][1]["text"].startswith(SUMMARY_MARK)
    assert after[1]["role"] == "assistant"
    # As sent, less the prompt cache's breakpoints (agentkit/llm/anthropic.py).
    assert engine.conversation(run)[:-1] == unmarked(requests[-1].body["messages"])


def unmarked(messages: list[dict]) -> list[dict]:
    def block(b: dict) -> dict:
        return {k: v for k, v in b.items() if k != "cache_control"}

    return [
        {**m, "content": [block(b) for b in m["content"]]} if isinstance(m["content"], list) else m
        for m in messages
    ]
