"""The Python client (clients/python) against a live agentops: request_approval blocks until a
person decides and returns exactly the approved (or edited) arguments; the adapters answer
their SDKs' shapes."""

import asyncio
import concurrent.futures
import threading
import time

import pytest
from agentops_client import AgentopsClient, AgentopsError, ApprovalTimeout
from agentops_client.claude import can_use_tool
from agentops_client.openai_agents import gated

from tests.support.droppable_proxy import DroppableProxy

from .live_agentops import external_agent


@pytest.fixture(scope="module")
def client(up) -> AgentopsClient:
    return AgentopsClient(up.url, external_agent(up))


def decide_when_pending(live_approver, decision="approve", **kw) -> threading.Thread:
    """A person deciding, in the background, once the call waits for them."""

    def person():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            waiting = live_approver.pending()
            if waiting:
                live_approver.decide(waiting[0], decision, **kw)
                return
            time.sleep(0.1)

    thread = threading.Thread(target=person)
    thread.start()
    return thread


def test_an_allowed_call_comes_back_at_once(client):
    session = client.session("allowed")
    decision = session.request_approval("read_file", {"path": "a.txt"}, timeout=5)
    assert (decision.status, decision.approved, decision.args) == (
        "allowed",
        True,
        {"path": "a.txt"},
    )
    session.report(decision, result="hello")
    assert session.close() == "succeeded"


def test_request_approval_blocks_until_approved_with_the_edited_args(live_approver, client):
    session = client.session("edited")
    person = decide_when_pending(live_approver, arguments={"vendor": "acme", "amount": 450})
    decision = session.request_approval(
        "pay_invoice", {"vendor": "acme", "amount": 900}, summary="March", timeout=60
    )
    person.join()
    assert decision.approved and decision.edited
    assert decision.args == {"vendor": "acme", "amount": 450}
    assert decision.decided_by == "approver"


def test_a_rejection_returns_the_reason(live_approver, client):
    session = client.session("rejected")
    person = decide_when_pending(live_approver, "reject", reason="main is protected")
    decision = session.request_approval("delete_branch", {"name": "main"}, timeout=60)
    person.join()
    assert (decision.approved, decision.status, decision.reason) == (
        False,
        "rejected",
        "main is protected",
    )
    assert session.close("failed", detail="could not clean up") == "failed"


def test_timeouts_and_refusals_are_clear_errors(up, live_approver, client):
    session = client.session("timeout")
    with pytest.raises(ApprovalTimeout):
        session.request_approval("delete_branch", {"name": "x"}, timeout=1)
    with pytest.raises(AgentopsError) as refused:
        session.request_approval("pay_invoice", {"vendor": "acme"}, timeout=1)
    assert refused.value.status == 422 and "amount" in refused.value.detail
    with pytest.raises(AgentopsError) as unauthenticated:
        AgentopsClient(up.url, "aoa_wrong").session()
    assert unauthenticated.value.status == 401
    # Leave nothing pending for the next test's person.
    for approval in live_approver.pending():
        live_approver.decide(approval, "reject", reason="cleanup")


def test_a_wait_outlives_a_dropped_network(up, live_approver):
    # Between the agent and agentops, a relay that can cut every connection (a restart, a
    # proxy's idle cut): the waiting agent asks again, and gets the decision made meanwhile.
    relay = DroppableProxy(int(up.url.rsplit(":", 1)[1]))
    try:
        session = AgentopsClient(relay.url, external_agent(up, "dropped-bot")).session("dropped")
        call = session.submit("pay_invoice", {"vendor": "acme", "amount": 900})
        assert call["status"] == "pending"
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(session.wait_for, call["call"], timeout=60, poll=5)
            time.sleep(0.5)
            relay.down()  # the open long-poll is cut; new connections are refused
            time.sleep(2.0)
            assert relay.dropped and not waiting.done()
            (approval,) = live_approver.pending("dropped-bot")
            live_approver.decide(approval, "approve")  # while the agent cannot reach agentops
            relay.up()
            decision = waiting.result(timeout=30)
        assert decision.approved and decision.args == {"vendor": "acme", "amount": 900}
    finally:
        relay.close()


def run_coroutine(coroutine):
    """asyncio.run on a thread of its own, as the SDK's own loop would await the hook: the
    browser tests' Playwright (sync API) keeps an event loop marked running on this thread
    for the rest of the session, where asyncio.run refuses to start."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def test_the_claude_hook_answers_allow_with_the_approved_input(live_approver, client):
    session = client.session("claude")
    hook = can_use_tool(session)
    person = decide_when_pending(live_approver, arguments={"command": "ls -la"})
    result = run_coroutine(hook("Bash", {"command": "rm -rf /tmp/x"}, None))
    person.join()
    assert result.behavior == "allow" and result.updated_input == {"command": "ls -la"}
    person = decide_when_pending(live_approver, "reject", reason="no shell today")
    denied = run_coroutine(hook("Bash", {"command": "whoami"}, None))
    person.join()
    assert denied.behavior == "deny" and denied.message == (
        "agentops: rejected by approver: no shell today"
    )


def test_the_openai_wrapper_runs_the_tool_with_the_approved_args_only(live_approver, client):
    session = client.session("openai")
    paid = []

    def pay_invoice(vendor: str, amount: float) -> str:
        """Pay a vendor's invoice."""
        paid.append((vendor, amount))
        return f"paid {amount} to {vendor}"

    tool = gated(session, pay_invoice, hints={"reversible": False, "blast": "medium"})
    assert tool.__name__ == "pay_invoice" and tool.__doc__ == "Pay a vendor's invoice."
    person = decide_when_pending(live_approver, arguments={"vendor": "acme", "amount": 120})
    assert asyncio.run(tool("acme", 900)) == "paid 120 to acme"
    person.join()
    assert paid == [("acme", 120)]
    person = decide_when_pending(live_approver, "reject", reason="duplicate invoice")
    assert "duplicate invoice" in asyncio.run(tool(vendor="acme", amount=900))
    person.join()
    assert paid == [("acme", 120)]


def test_a_langgraph_interrupt_resumes_with_the_approved_args(live_approver, client):
    from typing import TypedDict

    from agentops_client.langgraph import ask, run_with_approvals
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph

    class State(TypedDict, total=False):
        vendor: str
        amount: float
        paid: dict
        refused: str

    def pay(state: State) -> State:
        decision = ask(
            "pay_invoice",
            {"vendor": state["vendor"], "amount": state["amount"]},
            summary="paying from a LangGraph graph",
        )
        if not decision["approved"]:
            return {"refused": decision["reason"]}
        return {"paid": decision["args"]}

    graph = (
        StateGraph(State)
        .add_node("pay", pay)
        .add_edge(START, "pay")
        .add_edge("pay", END)
        .compile(checkpointer=InMemorySaver())
    )
    session = client.session("langgraph")
    person = decide_when_pending(live_approver, arguments={"vendor": "acme", "amount": 600})
    result = run_with_approvals(
        graph, {"vendor": "acme", "amount": 900}, {"configurable": {"thread_id": "t1"}}, session
    )
    person.join()
    assert result["paid"] == {"vendor": "acme", "amount": 600}
    person = decide_when_pending(live_approver, "reject", reason="over budget")
    result = run_with_approvals(
        graph, {"vendor": "acme", "amount": 900}, {"configurable": {"thread_id": "t2"}}, session
    )
    person.join()
    assert result["refused"] == "over budget" and "paid" not in result
    # Below the threshold the policy allows it: no interrupt reaches a person.
    result = run_with_approvals(
        graph, {"vendor": "acme", "amount": 20}, {"configurable": {"thread_id": "t3"}}, session
    )
    assert result["paid"] == {"vendor": "acme", "amount": 20}


@pytest.mark.parametrize(
    ("script", "edit", "printed"),
    [
        (
            "plain_request_approval.py",
            {"vendor": "acme", "amount": 450},
            "PAY {'vendor': 'acme', 'amount': 450}",
        ),
        (
            "claude_agent_sdk_hook.py",
            {"command": "git branch -d old-feature"},
            "RUN Bash {'command': 'git branch -d old-feature'}",
        ),
        (
            "openai_agents_tool.py",
            {"vendor": "acme", "amount": 450},
            "TOOL OUTPUT: paid 450 to acme",
        ),
        (
            "langgraph_interrupt.py",
            {"vendor": "acme", "amount": 450},
            "PAY {'vendor': 'acme', 'amount': 450}",
        ),
    ],
)
def test_the_examples_run_against_a_local_agentops(
    up, live_approver, client, script, edit, printed
):
    import os
    import subprocess
    import sys

    from tests.livesupport import ROOT

    person = decide_when_pending(live_approver, arguments=edit)
    env = {**os.environ, "AGENTOPS_URL": up.url, "AGENTOPS_TOKEN": client.token}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    person.join()
    assert done.returncode == 0, done.stderr
    assert printed in done.stdout
