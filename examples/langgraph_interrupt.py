"""A LangGraph graph whose node asks agentops through interrupt(), resumed with the decision.

    AGENTOPS_TOKEN=aoa_… uv run python examples/langgraph_interrupt.py

The "model" node is scripted (it proposes a payment); the "pay" node asks with
`agentops_client.langgraph.ask`, which pauses the graph; `run_with_approvals` sends the
interrupt to agentops, waits for a person, and resumes with Command(resume=<decision>).
"""

import os
from typing import TypedDict

from agentops_client import AgentopsClient
from agentops_client.langgraph import ask, run_with_approvals
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph


class State(TypedDict, total=False):
    proposal: dict
    outcome: str


def model(state: State) -> State:
    # A scripted model turn: the call it would propose.
    return {"proposal": {"vendor": "acme", "amount": 900.0}}


def pay(state: State) -> State:
    decision = ask(
        "pay_invoice",
        state["proposal"],
        hints={"reversible": False, "blast": "low"},
        summary="Paying acme's March invoice",
    )
    if not decision["approved"]:
        return {"outcome": f"NOT PAID: {decision['status']}: {decision['reason']}"}
    # Exactly the approved arguments (an approver may have edited them).
    return {"outcome": f"PAY {decision['args']}"}


def build():
    graph = StateGraph(State)
    graph.add_node("model", model)
    graph.add_node("pay", pay)
    graph.add_edge(START, "model")
    graph.add_edge("model", "pay")
    graph.add_edge("pay", END)
    return graph.compile(checkpointer=InMemorySaver())


def main() -> None:
    client = AgentopsClient(
        os.environ.get("AGENTOPS_URL", "http://127.0.0.1:8000"), os.environ["AGENTOPS_TOKEN"]
    )
    session = client.session("langgraph example")
    result = run_with_approvals(build(), {}, {"configurable": {"thread_id": session.id}}, session)
    print(result["outcome"])
    session.close()


if __name__ == "__main__":
    main()
