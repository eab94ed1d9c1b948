"""Where the run meets people: gated calls, questions, "continue?" checkpoints, decisions.

The engine opens approvals through the gate policy's interface (gates.py) in the same
transaction as the step that needs them, parks the run (lease.park_for_humans) until they
are decided, and here applies each decision when the run is resumed: an approved call runs
exactly as approved (its arguments' hash must match), a rejection or expiry goes back to the
agent as the call's result (or fails the run, per tool and per gate), an answer is the
question's result. Whether a call needs a person is the policy's, never decided here.
"""

from collections.abc import Callable

from django.db import transaction
from django.utils import timezone

from agentkit.tools import Tool, get_tool

from ..models import Run, args_hash
from . import gates, lease, ledger, owned
from .owned import Stop, Work
from .terminator import terminate


def continue_checkpoint(work: Work) -> None:
    """Every N model steps (GateRules.continue_every_n_steps, 0 = off), before the next model
    call, the run waits for an operator to answer "continue?". "continue" goes on; "stop"
    (or a rejection) cancels the run; an expired question fails it as approval_expired."""
    policy = gates.current()
    if not policy.continue_due(work.run):
        return
    go_on_or_stop(
        work,
        lambda: policy.continue_answer(work.run),
        lambda: policy.open_continue_question(work.run),
    )


def go_on_or_stop(
    work: Work,
    answer_of: Callable[[], gates.ContinueAnswer | None],
    ask: Callable[[], object],
) -> None:
    """Wait (parked, no worker held) for a person's "continue?" answer, asking it first if
    nobody has been asked: returns on "continue"; "stop" (or a rejection) cancels the run,
    an expired question fails it as approval_expired (both raise Stop)."""
    answer = answer_of()
    if answer is None:
        with transaction.atomic():
            work.run = owned.locked(work)
            ask()
        lease.park_for_humans(work)  # returns only when it was answered meanwhile
        answer = answer_of()
    elif answer.outcome == gates.PENDING:
        lease.park_for_humans(work)
        answer = answer_of()
    assert answer is not None  # park_for_humans returns only once it is answered
    if answer.outcome == gates.CONTINUE:
        return
    if answer.outcome == gates.STOP:
        work.run.cancel(by=answer.by, reason=answer.detail)
        raise Stop
    terminate(work, Run.Termination.APPROVAL_EXPIRED, answer.detail)


def regate(work: Work) -> None:
    """Ask the gate policy about the pending calls a fork inherited (marked `regate`): an
    approval of the origin's approves nothing here, so each gated call gets its own. Parks
    the run when any needs a person."""
    policy = gates.current()
    opened = []
    for item in work.state["pending"]:
        if not item.pop("regate", False) or item["args"] is None:
            continue
        tool = get_tool(item["name"])
        gate = policy.gate_for_call(work.run, item, tool, None) if tool else None
        if gate is not None:
            if item.get("context"):
                # No model turn proposed it: what the approver reads instead (a compensation
                # says which effect it undoes, and who asked).
                gate = {**gate, "context": item["context"][:4000]}
            opened.append((item, gate))
    if not opened:
        return  # written with the next step's checkpoint
    with transaction.atomic():
        work.run = owned.locked(work)
        for item, gate in opened:
            item["approval"] = policy.open_gate(work.run, item, gate)
        owned.write_checkpoint(work)
    lease.park_for_humans(work)


def apply_decision(work: Work, item: dict, tool: Tool, decision: gates.Decision) -> dict | None:
    """The arguments to execute, or None when the decision itself produced the tool result."""
    who = decision.by or "the system"
    if decision.status == gates.APPROVED:
        # The executed call must be exactly the one the approver saw and approved.
        if args_hash(tool.name, decision.args) != decision.args_hash:
            ledger.record_tool_result(
                work, item, error="approved arguments do not match; not executed", attempts=0
            )
            return None
        return decision.args
    if decision.status == gates.ANSWERED:
        if decision.side_effect_id:
            return ledger.resolve_unknown_outcome(work, item, decision)
        result = {"answer": decision.answer, "answered_by": who}
        ledger.record_tool_result(work, item, result=result, attempts=0)
        return None
    if decision.status == gates.REJECTED:
        message = f"rejected by {who}: {decision.reason or 'no reason given'}"
        ledger.record_tool_result(work, item, error=message, attempts=0, counts_as_error=False)
        if tool.on_reject == "fail_run":
            terminate(work, Run.Termination.REJECTED, message)
        return None
    # Expired, or any status this code does not know: never executed.
    when = decision.decided_at or timezone.now()
    message = f"approval {decision.status} at {when:%Y-%m-%d %H:%M} UTC; not executed"
    ledger.record_tool_result(work, item, error=message, attempts=0, counts_as_error=False)
    if decision.on_expiry == "fail":
        terminate(work, Run.Termination.APPROVAL_EXPIRED, message)
    return None
