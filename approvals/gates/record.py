"""The two ways a gate is recorded: a person is asked (`ask_person`), or the call was approved
without one, by a plan, a learned rule or a standing grant (`approved_without_person`). Both
write an Approval and its gate step in the run's hash-chained timeline, inside the engine's
transaction (the run row locked by the caller); approvers are notified once it commits.
"""

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from agentkit import previews
from agentkit.tools import Blast, get_tool
from runs import events
from runs.models import Run, SideEffect, Step, args_hash

from .. import tasks
from ..models import Approval, Grant
from . import config


def deadline(run: Run) -> tuple[timedelta, str]:
    """How long a person has to decide, and what its expiry does (the agent's rules)."""
    gates = run.agent_config.get("gates", {})
    seconds = gates.get("approval_timeout_seconds")
    return (
        config.APPROVAL_TIMEOUT if seconds is None else timedelta(seconds=seconds),
        gates.get("on_expiry", config.ON_EXPIRY),
    )


def ask_person(
    run: Run,
    item: dict,
    *,
    kind: str,
    tool: str,
    explanation: str,
    risk: str,
    question: str = "",
    options: list | None = None,
    sampled: bool = False,
    context: str = "",
    side_effect: SideEffect | None = None,
    suffix: str = "",
    findings: list | None = None,
    step_extra: dict | None = None,
) -> Approval:
    """A pending Approval a person decides, its gate step, and its notification on commit."""
    timeout, on_expiry = deadline(run)
    now = timezone.now()
    found = get_tool(tool) if kind == Approval.Kind.ACTION and tool else None
    # Read-only, inside the engine's transaction: the data as it is when the person is asked.
    preview = previews.compute(found.preview, item["args"]) if found is not None else None
    approval = Approval(
        run=run,
        gate_seq=run.last_seq + 1,
        llm_seq=item["llm_seq"],
        tool_use_id=item["id"] + suffix,
        kind=kind,
        tool=tool,
        args=item["args"],
        args_hash=args_hash(tool, item["args"]) if tool else "",
        # The model's words, as the timeline keeps them (masked under a PII policy).
        question=run.recorded({"q": question})["q"],
        options=options or [],
        explanation=explanation,
        risk=risk if risk in Approval.Risk.values else Blast.MEDIUM.label,
        sampled=sampled,
        context_summary=run.recorded({"c": context})["c"],
        preview=preview,
        side_effect=side_effect,
        on_expiry=on_expiry,
        requested_at=now,
        expires_at=now + timeout,
    )
    approval.save(force_insert=True)
    gate_step(
        run,
        approval,
        item,
        question=question,
        options=options or [],
        sampled=sampled,
        expires_at=approval.expires_at.isoformat(),
        # The PII guard's findings (masked), for the approval card.
        **({"findings": findings} if findings else {}),
        # Which preview the approver is shown (the preview itself is the approval's).
        **({"preview_hash": preview["hash"]} if preview else {}),
        # What a plan said of the call, or that it is a plan (approvals/plans/gates.py).
        **(step_extra or {}),
    )
    events.publish_approvals_changed(approval.pk)
    transaction.on_commit(lambda: tasks.approval_requested(approval.pk))
    return approval


def approved_without_person(
    run: Run,
    item: dict,
    *,
    tool: str,
    risk: str,
    explanation: str,
    reason: str,
    grant: Grant | None = None,
    step: dict,
) -> Approval:
    """The audit record of a call approved without a person: an Approval already approved,
    whose `reason` says by what ("approved by rule #3", "allowed by plan #2 step 1 …"), and a
    gate step with `step` saying so, so the engine runs it as any approved call and the
    timeline shows who let it through. Nobody is notified."""
    now = timezone.now()
    hashed = args_hash(tool, item["args"])
    approval = Approval(
        run=run,
        gate_seq=run.last_seq + 1,
        llm_seq=item["llm_seq"],
        tool_use_id=item["id"],
        kind=Approval.Kind.ACTION,
        tool=tool,
        args=item["args"],
        args_hash=hashed,
        approved_args_hash=hashed,
        explanation=explanation,
        risk=risk if risk in Approval.Risk.values else Blast.MEDIUM.label,
        status=Approval.Status.APPROVED,
        reason=reason,
        grant=grant,
        requested_at=now,
        decided_at=now,
        expires_at=now,
    )
    approval.save(force_insert=True)
    gate_step(run, approval, item, status=Approval.Status.APPROVED, **step)
    return approval


def gate_step(run: Run, approval: Approval, item: dict, **extra) -> None:
    """The gate's step in the run's timeline, for an approval a person decides and for one
    approved without a person alike; `extra` says what differs."""
    run.append_step(
        Step.Kind.GATE,
        {
            "approval": str(approval.pk),
            "kind": approval.kind,
            "tool_use_id": item["id"],
            "tool": approval.tool,
            "args": item["args"],
            "explanation": approval.explanation,
            "risk": approval.risk,
            **extra,
        },
    )
