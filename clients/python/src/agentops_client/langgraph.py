"""LangGraph: a node asks for approval with `interrupt()`, agentops decides, the graph resumes.

In a node, `decision = ask("tool", args, hints=..., summary=...)` pauses the graph (a
LangGraph interrupt carrying the call). The driver, `run_with_approvals(graph, input,
config, session)`, submits **every** pending interrupt's call to agentops first (parallel
branches wait together: people see all the approvals at once and decide them in any order),
then waits for all of them on one connection (the session's event stream) and resumes the
graph with `Command(resume=...)`: per interrupt, the decision as a dict with `approved`,
`args` (run exactly these: an approver may have edited them), `reason`, `decided_by` and
`call_id`. The graph needs a checkpointer (interrupts do), e.g. `InMemorySaver()`.

Each call's id in agentops is its interrupt's id, so a driver that restarts and resumes the
same thread (same checkpointer) waits on the approvals it opened before, never on new ones.
After running the call, the node reports what it did: `report(decision, result=...)` (or
`error=...`), the session's tool step.
"""

from __future__ import annotations

from typing import Any

from .client import Decision, Session

MARK = "agentops_approval"
# call id -> the session that submitted it, for `report` from inside a node (this process).
_SESSIONS: dict[str, Session] = {}


def ask(tool: str, args: dict, *, hints: dict | None = None, summary: str = "") -> dict:
    """Inside a node: pause for agentops' decision on this call; returns it as a dict."""
    from langgraph.types import interrupt

    return interrupt({MARK: True, "tool": tool, "args": args, "hints": hints, "summary": summary})


def report(decision: dict, *, result: Any = None, error: str | None = None) -> None:
    """Inside a node, after running an approved call: what it did, on the session's
    timeline."""
    session = _SESSIONS.get(decision["call_id"])
    if session is None:
        raise LookupError("this decision was not made through run_with_approvals here")
    session.report(Decision(**{**_fields(decision)}), result=result, error=error)


def _fields(decision: dict) -> dict:
    keys = ("call_id", "tool", "status", "approved", "args", "reason", "decided_by", "edited")
    return {k: decision[k] for k in keys if k in decision}


def resume_command(session: Session, interrupts: list, *, timeout: float = 3600) -> Any:
    """The Command(resume=...) that answers these interrupts with agentops' decisions."""
    from langgraph.types import Command

    submitted: list[tuple[str, dict]] = []
    for item in interrupts:
        payload = item.value
        if not (isinstance(payload, dict) and payload.get(MARK)):
            raise ValueError(
                f"not an approval request: {payload!r} (use agentops_client.langgraph.ask)"
            )
        answer = session.submit(
            payload["tool"],
            payload.get("args") or {},
            hints=payload.get("hints"),
            summary=payload.get("summary") or "",
            call_id=f"langgraph:{item.id}",
        )
        submitted.append((item.id, answer))
    waiting = [answer["call"] for _, answer in submitted if answer["status"] == "pending"]
    decided = session.wait_all(waiting, timeout=timeout) if waiting else {}
    answers: dict[str, dict] = {}
    for interrupt_id, answer in submitted:
        decision = decided.get(answer["call"]) or Decision.from_json(answer)
        _SESSIONS[decision.call_id] = session
        answers[interrupt_id] = decision.as_dict()
    if len(answers) == 1:
        return Command(resume=next(iter(answers.values())))
    return Command(resume=answers)


def run_with_approvals(
    graph: Any, input: Any, config: dict, session: Session, *, timeout: float = 3600
) -> Any:
    """invoke() the graph, answering its approval interrupts until it finishes. Given
    `input=None` on a thread that is already interrupted (a restarted driver), it answers the
    interrupts that thread is waiting on."""
    if input is None:
        pending = graph.get_state(config).interrupts
        result = {"__interrupt__": list(pending)} if pending else graph.invoke(None, config)
    else:
        result = graph.invoke(input, config)
    while isinstance(result, dict) and result.get("__interrupt__"):
        result = graph.invoke(
            resume_command(session, result["__interrupt__"], timeout=timeout), config
        )
    return result
