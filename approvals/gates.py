"""Opening approvals from the engine: a gated call, or a question to the operator.

Runs inside the engine's transaction (the run row is locked by the caller).
"""

from datetime import timedelta

from django.utils import timezone

from agentops.tools import Blast, Tool, ToolError, tool
from runs import events
from runs.models import Run, SideEffect, Step

from . import policy
from .models import Approval, args_hash

ASK_OPERATOR = "ask_operator"


@tool(reversible=True, blast=Blast.NONE, name=ASK_OPERATOR)
def ask_operator(question: str, options: list[str] | None = None) -> dict:
    """Ask the human operator a question and wait for the answer. Use it to clarify instead
    of guessing. Optionally offer a short list of answers to choose from."""
    raise ToolError("ask_operator is answered by a person, not executed")


def _deadline(run: Run) -> tuple[timedelta, str]:
    gates = run.agent_config.get("gates", {})
    return (
        timedelta(seconds=gates.get("approval_timeout_seconds", 24 * 3600)),
        gates.get("on_expiry", "reject"),
    )


def open_for_call(run: Run, item: dict, tool: Tool, response=None) -> Approval | None:
    """Gate the call if policy says so: Approval + gate step. None means it may run."""
    if tool.name == ASK_OPERATOR:
        return _open(
            run,
            item,
            kind=Approval.Kind.QUESTION,
            tool=tool,
            question=item["args"]["question"],
            options=item["args"].get("options") or [],
            explanation="the agent asked the operator a question",
            risk=Approval.Risk.LOW,
        )
    verdict = policy.evaluate(tool=tool, args=item["args"], rules=run.agent_config.get("gates", {}))
    if not verdict.gated:
        return None
    return _open(
        run,
        item,
        kind=Approval.Kind.ACTION,
        tool=tool,
        explanation=verdict.explanation,
        risk=verdict.risk,
        sampled=verdict.sampled,
        context=(response.text if response is not None else "")[:4000],
    )


def open_outcome_question(run: Run, item: dict, tool: Tool, effect: SideEffect) -> Approval:
    return _open(
        run,
        item,
        kind=Approval.Kind.QUESTION,
        tool=tool,
        question=(
            f"A worker stopped while calling {tool.name}, which cannot de-duplicate retries. "
            f"Did this {tool.name} call take effect?"
        ),
        options=["happened", "did_not_happen"],
        explanation="outcome unknown: the call was started but its result was never recorded",
        risk=tool.blast.label,
        side_effect=effect,
        suffix=f":unknown:{effect.attempts}",
    )


def _open(
    run: Run,
    item: dict,
    *,
    kind: str,
    tool: Tool,
    explanation: str,
    risk: str,
    question: str = "",
    options: list | None = None,
    sampled: bool = False,
    context: str = "",
    side_effect: SideEffect | None = None,
    suffix: str = "",
) -> Approval:
    timeout, on_expiry = _deadline(run)
    now = timezone.now()
    approval = Approval(
        run=run,
        gate_seq=run.last_seq + 1,
        llm_seq=item["llm_seq"],
        tool_use_id=item["id"] + suffix,
        kind=kind,
        tool=tool.name,
        args=item["args"],
        args_hash=args_hash(tool.name, item["args"]),
        question=question,
        options=options or [],
        explanation=explanation,
        risk=risk if risk in Approval.Risk.values else Blast.MEDIUM.label,
        sampled=sampled,
        context_summary=context,
        side_effect=side_effect,
        on_expiry=on_expiry,
        requested_at=now,
        expires_at=now + timeout,
    )
    approval.save(force_insert=True)
    run.append_step(
        Step.Kind.GATE,
        {
            "approval": str(approval.pk),
            "kind": kind,
            "tool_use_id": item["id"],
            "tool": tool.name,
            "args": item["args"],
            "question": question,
            "options": options or [],
            "explanation": explanation,
            "risk": approval.risk,
            "sampled": sampled,
            "expires_at": approval.expires_at.isoformat(),
        },
    )
    events.publish_approvals_changed(approval.pk)
    return approval
