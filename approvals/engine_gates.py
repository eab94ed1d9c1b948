"""What the engine asks of people, as it sees it (runs.engine.gates.Gates): the gate decision
on a proposed call (the cascade's, approvals/gates/cascade.py), the questions it asks (an
unknown outcome, a failed verification, "continue?", a spent budget) and what people decided.

approvals/apps.py hands this module to the engine at start-up (`use_gates`); the engine never
imports approvals. The writes run inside the engine's transaction (the run row is locked by
the caller). Approvers are notified (approvals/tasks.py) once that transaction commits.
"""

from django.db import transaction

from agentkit.tools import Blast, Tool, ToolError, tool
from runs.engine.gates import CONTINUE, EXPIRE, PENDING, STOP, ContinueAnswer, Decision
from runs.models import Run, SideEffect, Step

from . import tasks
from .gates import cascade, record
from .gates import config as gate_config
from .gates.cascade import ASK_OPERATOR
from .models import Approval


@tool(reversible=True, blast=Blast.NONE, name=ASK_OPERATOR)
def ask_operator(question: str, options: list[str] | None = None) -> dict:
    """Ask the human operator a question and wait for the answer. Use it to clarify instead
    of guessing. Optionally offer a short list of answers to choose from."""
    raise ToolError("ask_operator is answered by a person, not executed")


# The gate decision is the cascade's (approvals/gates/cascade.py); the engine asks it here.
gate_for_call = cascade.gate_for_call
open_gate = cascade.open_gate


def config_problems(config: dict) -> list[str]:
    """The rules of a run's snapshot that mean nothing (gates/config.problems): the check that
    refuses them at `manage.py check`, asked again by the engine at every claim."""
    return gate_config.problems(config)


def open_outcome_question(run: Run, item: dict, tool: Tool, effect: SideEffect) -> str:
    """Ask whether a call whose outcome was never recorded took effect; the approval's id."""
    approval = record.ask_person(
        run,
        item,
        kind=Approval.Kind.QUESTION,
        tool=tool.name,
        question=(
            f"{_why_unknown(item, tool)}, and {tool.name} cannot de-duplicate retries. "
            f"Did this {tool.name} call take effect?"
        ),
        options=["happened", "did_not_happen"],
        explanation="outcome unknown: the call was started but its result was never recorded",
        risk=tool.blast.label,
        side_effect=effect,
        suffix=f":unknown:{effect.attempts}",
    )
    return str(approval.pk)


def _why_unknown(item: dict, tool: Tool) -> str:
    """What left the outcome unknown: the call's own failure (a timeout, a dropped connection:
    runs/engine/ledger.py notes it), else a worker that stopped during the call."""
    because = item.get("unknown_because")
    if because:
        return f"The {tool.name} call failed without saying whether it took effect ({because})"
    return f"A worker stopped while calling {tool.name}"


def open_verification_question(run: Run, failed: dict) -> str:
    """A final answer failed its verifier as often as allowed and a person decides
    (Verifier(on_fail="person")); the approval's id. Free text, so "send back" can carry a
    note: "accept" and "fail" are the two words the engine reads as such."""
    approval = record.ask_person(
        run,
        {"llm_seq": failed["llm_seq"], "id": failed["key"], "args": {}},
        kind=Approval.Kind.QUESTION,
        tool="",
        question=(
            f"The agent's {failed['subject']} failed verification by {failed['verifier']} "
            f"{failed['attempts']} time(s): {failed['reason']}\n"
            'Answer "accept" to accept the answer as it is, "fail" to fail the run, or write '
            "a note to send the answer back to the agent with it."
        ),
        options=[],
        explanation=f"verification failed: {failed['reason']}"[:1000],
        risk=Approval.Risk.MEDIUM,
        context=str(failed["output"])[:4000],
    )
    return str(approval.pk)


def pending_count(run: Run) -> int:
    return Approval.objects.filter(run=run, status=Approval.Status.PENDING).count()


def decisions(ids: list[str]) -> dict[str, Decision]:
    """The engine's view of these approvals: what was decided, by whom, what to execute."""
    approvals = Approval.objects.filter(pk__in=ids).select_related("decided_by")
    return {str(a.pk): _decision(a) for a in approvals}


def _decision(approval: Approval) -> Decision:
    return Decision(
        id=str(approval.pk),
        status=approval.status,
        args=approval.final_args,
        args_hash=approval.approved_args_hash or approval.args_hash,
        by=approval.decided_by.get_username() if approval.decided_by else None,
        answer=approval.answer,
        reason=approval.reason,
        on_expiry=approval.on_expiry,
        decided_at=approval.decided_at,
        side_effect_id=approval.side_effect_id,
    )


# --- periodic "continue?" checkpoint -----------------------------------------------------------
# Every N model steps (GateRules.continue_every_n_steps, 0 = off) the run asks the operator
# whether to go on, before its next model call. The engine calls these from
# runs.engine.humans.continue_checkpoint. One question per checkpoint: its tool_use_id names the
# step count, so re-entering the check after a resume finds the answered question.


def continue_due(run: Run) -> bool:
    every = int(run.agent_config.get("gates", {}).get("continue_every_n_steps") or 0)
    return every > 0 and run.step_count > 0 and run.step_count % every == 0


def _continue_id(run: Run) -> str:
    return f"continue:{run.step_count}"


def continue_question(run: Run) -> Approval | None:
    return Approval.objects.filter(run=run, tool_use_id=_continue_id(run)).first()


def open_continue_question(run: Run) -> Approval:
    """Ask "continue?" (options continue / stop). Call with the run locked and owned."""
    last_llm = run.steps.filter(kind=Step.Kind.LLM).order_by("-seq").first()
    llm_seq = last_llm.seq if last_llm else run.last_seq
    every = int(run.agent_config["gates"]["continue_every_n_steps"])
    return record.ask_person(
        run,
        {"llm_seq": llm_seq, "id": _continue_id(run), "args": {}},
        kind=Approval.Kind.QUESTION,
        tool="",
        question=(
            f"The agent has made {run.step_count} model calls "
            f"(cost so far {run.cost_usd:.4f} USD). Continue?"
        ),
        options=[CONTINUE, STOP],
        explanation=(
            f"periodic checkpoint: every {every} model steps a person confirms the run should go on"
        ),
        risk=Approval.Risk.LOW,
        context=_text(last_llm.data.get("content") or [])[:4000] if last_llm else "",
    )


def continue_answer(run: Run) -> ContinueAnswer | None:
    """The due checkpoint's state: None when not asked yet, else pending, continue, stop or
    expired, with the detail in plain words. Only an explicit "continue" goes on; "stop",
    any other answer, or a rejection stops."""
    return _go_on_answer(continue_question(run), "the continue? checkpoint")


def _go_on_answer(approval: Approval | None, what: str) -> ContinueAnswer | None:
    if approval is None:
        return None
    if approval.status == Approval.Status.PENDING:
        return ContinueAnswer(PENDING)
    if approval.status == Approval.Status.EXPIRED and approval.on_expiry == "halt":
        # The expiry halted the run; it only moves again when an operator resumes it.
        return ContinueAnswer(CONTINUE)
    if approval.status == Approval.Status.EXPIRED:
        return ContinueAnswer(EXPIRE, f"nobody answered {what} before it expired")
    if (
        approval.status == Approval.Status.ANSWERED
        and approval.answer.strip().casefold() == CONTINUE
    ):
        return ContinueAnswer(CONTINUE)
    who = approval.decided_by.get_username() if approval.decided_by else "the system"
    why = f": {approval.reason}" if approval.reason else ""
    return ContinueAnswer(STOP, f"stopped by {who} at {what}{why}", by=approval.decided_by)


# --- budgets (runs/budgets/models.py) -------------------------------------------------------------
def budget_answer(run: Run, key: str) -> ContinueAnswer | None:
    approval = Approval.objects.filter(run=run, tool_use_id=key).first()
    return _go_on_answer(approval, "the budget question")


def open_budget_question(run: Run, key: str, question: str, explanation: str) -> Approval:
    """Ask "budget exceeded: continue?" (options continue / stop), once per run and budget
    period. Call with the run locked and owned."""
    return record.ask_person(
        run,
        {"llm_seq": run.last_seq, "id": key, "args": {}},
        kind=Approval.Kind.QUESTION,
        tool="",
        question=question,
        options=[CONTINUE, STOP],
        explanation=explanation,
        risk=Approval.Risk.MEDIUM,
    )


def budget_crossed(run: Run, crossing_id: int) -> None:
    transaction.on_commit(lambda: tasks.budget_crossed(crossing_id))


def _text(content: list[dict]) -> str:
    return "\n".join(b.get("text", "") for b in content if b.get("type") == "text")
