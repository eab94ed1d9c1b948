"""LangGraph: a node asks for approval with `interrupt()`, agentops decides, the graph resumes.

In a node, `decision = ask("tool", args, hints=..., summary=...)` pauses the graph (a
LangGraph interrupt carrying the call). The driver, `run_with_approvals(graph, input,
config, session)`, submits each interrupt's call to agentops, waits for the decision and
resumes the graph with `Command(resume=<the decision as a dict>)`: `approved`, `args` (run
exactly these: an approver may have edited them), `reason`, `decided_by`. The graph needs a
checkpointer (interrupts do), e.g. `InMemorySaver()`.
"""

from __future__ import annotations

from typing import Any

from .client import Session

MARK = "agentops_approval"


def ask(tool: str, args: dict, *, hints: dict | None = None, summary: str = "") -> dict:
    """Inside a node: pause for agentops' decision on this call; returns it as a dict."""
    from langgraph.types import interrupt

    return interrupt({MARK: True, "tool": tool, "args": args, "hints": hints, "summary": summary})


def resume_command(session: Session, interrupts: list, *, timeout: float = 3600) -> Any:
    """The Command(resume=...) that answers these interrupts with agentops' decisions."""
    from langgraph.types import Command

    answers: dict[str, dict] = {}
    for item in interrupts:
        payload = item.value
        if not (isinstance(payload, dict) and payload.get(MARK)):
            raise ValueError(
                f"not an approval request: {payload!r} (use agentops_client.langgraph.ask)"
            )
        decision = session.request_approval(
            payload["tool"],
            payload.get("args") or {},
            hints=payload.get("hints"),
            summary=payload.get("summary") or "",
            timeout=timeout,
        )
        answers[item.id] = decision.as_dict()
    if len(answers) == 1:
        return Command(resume=next(iter(answers.values())))
    return Command(resume=answers)


def run_with_approvals(
    graph: Any, input: Any, config: dict, session: Session, *, timeout: float = 3600
) -> Any:
    """invoke() the graph, answering its approval interrupts until it finishes."""
    result = graph.invoke(input, config)
    while isinstance(result, dict) and result.get("__interrupt__"):
        result = graph.invoke(
            resume_command(session, result["__interrupt__"], timeout=timeout), config
        )
    return result
