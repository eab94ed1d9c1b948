"""Agents that run elsewhere, supervised here: each adapter of the Python client blocks until
an approver decides in the browser, then gets exactly the arguments approved (or edited).

The agent side runs in a thread of the test (as it would in its own process): a Claude Agent
SDK permission hook, an OpenAI Agents SDK function tool wrapped by `gated`, and a LangGraph
graph whose node asks through `interrupt()`.
"""

import asyncio
import threading
import time
from typing import TypedDict

import pytest
from agentops_client import AgentopsClient
from agentops_client.claude import can_use_tool
from agentops_client.langgraph import ask, run_with_approvals
from agentops_client.openai_agents import gated
from playwright.sync_api import expect

from tests.gateway.live_agentops import external_agent

from .conftest import screenshot
from .pages import decide

pytestmark = pytest.mark.e2e

PROPOSED = {"vendor": "acme", "amount": 900}


def claude_agent(session) -> dict:
    hook = can_use_tool(session, summary=lambda tool, args: f"Claude pays {args['vendor']}")
    result = asyncio.run(hook("pay_invoice", dict(PROPOSED), None))
    assert result.behavior == "allow"
    return result.updated_input


def openai_agent(session) -> dict:
    ran = []

    def pay_invoice(vendor: str, amount: float) -> str:
        """Pay a vendor's invoice."""
        ran.append({"vendor": vendor, "amount": amount})
        return "paid"

    assert asyncio.run(gated(session, pay_invoice)(**PROPOSED)) == "paid"
    assert len(ran) == 1
    return ran[0]


def langgraph_agent(session) -> dict:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph

    class State(TypedDict, total=False):
        paid: dict

    def pay(state: State) -> State:
        decision = ask("pay_invoice", dict(PROPOSED), summary="LangGraph pays acme")
        assert decision["approved"]
        return {"paid": decision["args"]}

    graph = StateGraph(State).add_node("pay", pay).add_edge(START, "pay").add_edge("pay", END)
    compiled = graph.compile(checkpointer=InMemorySaver())
    result = run_with_approvals(compiled, {}, {"configurable": {"thread_id": "e2e"}}, session)
    return result["paid"]


@pytest.mark.parametrize(
    ("agent", "edit"),
    [
        (claude_agent, {"amount": "450"}),
        (openai_agent, {}),
        (langgraph_agent, {"vendor": "globex", "amount": "300"}),
    ],
    ids=["claude-agent-sdk", "openai-agents-sdk", "langgraph"],
)
def test_an_external_agent_waits_for_the_browser_and_gets_exactly_the_decided_args(
    server, login, agent, edit
):
    client = AgentopsClient(server.url, external_agent(server.up, "e2e-external"))
    session = client.session(f"e2e {agent.__name__}")
    got: dict = {}

    def run_agent():
        try:
            got["args"] = agent(session)
        except BaseException as exc:  # the assertion shows in the main thread
            got["error"] = exc

    thread = threading.Thread(target=run_agent, daemon=True)
    thread.start()
    approval_id = server.pending_approval(session.id, tool="pay_invoice")
    approver = login("approver")
    approver.goto(f"/approvals/{approval_id}/")
    page = approver.page
    expect(page.locator("body")).to_contain_text("pay_invoice")
    time.sleep(0.5)
    assert thread.is_alive(), "the agent went on before anyone decided"
    for name, value in edit.items():
        page.fill(f"[name=arg_{name}]", value)
    if edit:
        # The server's reading of the edit is on screen; the press then goes from the field.
        diff = page.locator("#arg-diff")
        expect(diff).to_have_attribute("data-valid", "true")
        expect(diff.locator("li[data-arg]")).to_have_count(len(edit))
    decide(approver, approval_id, "edit-approve" if edit else "approve", navigate=False)
    if edit:
        expect(page.locator("#decision-outcome")).to_contain_text("Approved with your edits")
    thread.join(timeout=30)
    assert not thread.is_alive(), "the agent never got the decision"
    assert "error" not in got, got.get("error")
    expected = {**PROPOSED, **{k: (int(v) if k == "amount" else v) for k, v in edit.items()}}
    assert got["args"] == expected

    # The session is a run like any other: its page shows the call, the decision, the wait.
    session.close()
    approver.goto(f"/runs/{session.id}/")
    timeline = page.locator("#timeline")
    expect(timeline).to_contain_text("external call pay_invoice: gated")
    expect(timeline).to_contain_text("human: approve")
    expect(page.locator("body")).to_contain_text("external")
    if agent is claude_agent:
        screenshot(page, "external-agent-run")
