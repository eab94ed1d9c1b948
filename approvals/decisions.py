"""The decision service: approve, edit-and-approve, reject, answer; expiry; who opened what.
Why and how: docs/design/modules.md."""

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import OuterRef, Subquery
from django.dispatch import Signal
from django.utils import timezone

from accounts import teams
from agentkit import metrics, previews
from agentkit.tools import Blast, Tool, ToolArgsError
from runs import events
from runs.models import Run, Step, args_hash

from . import permissions, wait_traces
from .gates import policy as declared_policy
from .gates.policy import rank
from .models import Approval, ApprovalView, ApprovalVote
from .permissions import Permission
from .plans import edits as plan_edits

log = logging.getLogger("agentops.security")

DECISIONS = ("approve", "reject", "answer")
# Why an approval may not be approved now, as apps above this one know it (gateway: the call
# of an external agent that was deactivated); each returns the reason, or "". Appended to at
# start-up (their apps.py); an approval any of them holds is a DecisionConflict.
APPROVAL_HOLDS: list[Callable[[Approval, Run], str]] = []
# Sent after commit with `approval_id` once an approval is decided or expired (the Slack app
# updates its message: approvals/tasks.py).
decided = Signal()
# Sent inside the decision's transaction with `approval`, `status`, `edited` and `by` once a
# person's decision settles an approval: the learning wing moves its track records
# (approvals/apps.py connects it; the core does not import the wing).
settled = Signal()
OUTCOME_ANSWERS = ("happened", "did_not_happen")
_STATUS_BY_DECISION = {
    "approve": Approval.Status.APPROVED,
    "reject": Approval.Status.REJECTED,
    "answer": Approval.Status.ANSWERED,
}


class DecisionError(Exception):
    """Base of the errors a caller maps to an HTTP status (`status`)."""

    status = 400

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class DecisionConflict(DecisionError):
    """Not pending any more (or this user already voted): nothing was changed."""

    status = 409

    def __init__(
        self,
        message: str,
        *,
        approval_status: str = "",
        decided_by: str | None = None,
        decided_at: datetime | None = None,
    ):
        super().__init__(message)
        self.approval_status = approval_status
        self.decided_by = decided_by
        self.decided_at = decided_at


class PreviewChanged(DecisionConflict):
    """The call's preview, computed again at the decision, is not the one the approver was
    shown: the data changed since they looked. Nothing was decided; `preview` is the fresh
    one (also stored on the approval), to be shown before they decide again."""

    DETAIL = (
        "What this call would change is not what you were shown, so nothing was approved. "
        "Review the new preview and decide again."
    )

    def __init__(self, preview: dict):
        super().__init__(
            f"changed since you looked: {self.DETAIL}", approval_status=Approval.Status.PENDING
        )
        self.preview = preview


class DecisionForbidden(DecisionError):
    """This user may not make this decision (role, named approvers, four-eyes)."""

    status = 403


class DecisionInvalid(DecisionError):
    """The request itself is wrong: unknown decision, bad arguments, missing reason/answer."""

    status = 422

    def __init__(self, message: str, errors: dict[str, list[str]] | None = None):
        super().__init__(message)
        self.errors = errors or {}


# --- opening ---------------------------------------------------------------------------------
def record_open(approval: Approval, user) -> ApprovalView | None:
    """Remember when a person who may decide first opened a pending approval.

    Time to decide is measured from here; later opens keep the first time.
    """
    if approval.status != Approval.Status.PENDING:
        return None
    if not permissions.can_decide(user) or permissions.outside_teams(approval.run, user):
        return None
    view, _ = ApprovalView.objects.get_or_create(
        approval=approval, user=user, defaults={"first_opened_at": timezone.now()}
    )
    return view


# The name the web UI was told about; record_open says what it does.
open = record_open


# --- deciding --------------------------------------------------------------------------------
@dataclass
class _Plan:
    status: str
    final_args: dict | None = None
    edited: bool = False


def decide(
    approval_id,
    *,
    user,
    decision: str,
    arguments: dict | None = None,
    reason: str = "",
    answer: str = "",
    opened_at: datetime | None = None,
    shown_args_hash: str | None = None,
    shown_preview_hash: str | None = None,
    via: str = "",
) -> Approval:
    """Record `user`'s decision and, once the approval is decided, resume the run.

    `decision` is approve (with `arguments` for edit-and-approve), reject (with a reason) or
    answer (questions). `opened_at` is used only when the server has no record of this user
    opening the approval. `shown_args_hash` is the `args_hash` of the call the approver was
    shown: an approval of any other call is a DecisionConflict. `via` names the channel the
    decision came through (web, api, batch, one_tap, slack), kept in the decision's step for
    the compliance export (approvals/evidence/export.py). An approval of a call with an
    effect preview computes it again: when it differs from the one shown (`shown_preview_hash`,
    else the stored one) the data changed since, and PreviewChanged (a DecisionConflict)
    carries the fresh preview, which is stored for the next look. Raises
    Approval.DoesNotExist, DecisionForbidden, DecisionConflict or DecisionInvalid; on any of
    them nothing was decided.
    """
    decision = _checked_request(user, decision)
    reason = (reason or "").strip()
    answer = (answer or "").strip()
    try:
        decided = _decide(
            approval_id,
            user=user,
            decision=decision,
            arguments=arguments,
            reason=reason,
            answer=answer,
            opened_at=opened_at,
            shown_args_hash=shown_args_hash,
            shown_preview_hash=shown_preview_hash,
            via=via,
        )
    except PreviewChanged as changed:
        # After the rollback, so it stays (unless a caller's own transaction rolls back too:
        # the one-tap page stores it again, outside its own).
        store_preview(approval_id, changed.preview)
        raise
    _log_decision(decided, user, decision, via)
    return decided


def _log_decision(approval: Approval, user, decision: str, via: str) -> None:
    """The security log's line (agentops.security): who decided what, through which channel
    (a vote of a quorum leaves the approval pending)."""
    log.info(
        "%s %s approval %s of run %s (%s) via %s",
        user.get_username(),
        decision,
        approval.pk,
        approval.run_id,
        approval.status,
        via or "code",
        extra={
            "security_event": "decision",
            "username": user.get_username(),
            "decision": decision,
            "approval_id": str(approval.pk),
            "run_id": str(approval.run_id),
            "approval_status": approval.status,
            "via": via or None,
        },
    )


def store_preview(approval_id, preview: dict) -> None:
    """Keep a fresh preview on a still pending approval (the next look shows it)."""
    Approval.objects.filter(pk=approval_id, status=Approval.Status.PENDING).update(preview=preview)


def _decide(
    approval_id,
    *,
    user,
    decision: str,
    arguments: dict | None,
    reason: str,
    answer: str,
    opened_at: datetime | None,
    shown_args_hash: str | None,
    shown_preview_hash: str | None,
    via: str,
) -> Approval:
    """`decide`, in one transaction: everything it changes, or nothing."""
    with transaction.atomic():
        run, approval = _lock(approval_id, user)
        permission = _check_may_decide(approval, run, user, decision, shown_args_hash)
        principal, needed = permission.acting_for, permission.votes_needed
        shown_preview = _check_preview(approval, decision, shown_preview_hash)
        plan = _plan(approval, decision, arguments, reason, answer, permission.rules, needed)
        now = timezone.now()
        opened = _opened_at(approval.first_opened_at, opened_at, now)
        _record_vote(approval, user, decision, plan, reason, answer, opened, now)
        approvals_so_far = (
            approval.votes.filter(decision=ApprovalVote.Decision.APPROVE).count()
            if needed > 1
            else int(decision == "approve")
        )
        step = _decision_step(approval, user, decision, plan, reason, answer, opened, now)
        if via:
            step["via"] = via
        if shown_preview:
            step["preview_hash"] = shown_preview  # what the approver saw would change
        if principal is not None:
            # In the step, so in the run's hash chain: who decided, and for whom.
            step["acting_for"] = principal.get_username()
        if needed > 1:
            step["votes"] = f"{approvals_so_far} of {needed}"
        approval.run = run
        if plan.status == Approval.Status.APPROVED and approvals_so_far < needed:
            return _count_quorum_vote(approval, run, step, needed - approvals_so_far)
        fields = _settle(approval, user, plan, reason, answer, now)
        step["status"] = plan.status
        edited = fields.get("edited_args") is not None
        _after_settled(approval, run, step, plan, user, now, edited=edited)
    for name, value in fields.items():
        setattr(approval, name, value)
    approval.run = run
    return approval


def _checked_request(user, decision: str) -> str:
    """The decision word, normalised, once the caller may decide at all and the word is known."""
    decision = (decision or "").strip().lower()
    if not permissions.can_decide(user):
        raise DecisionForbidden(permissions.ONLY_APPROVERS)
    if decision not in DECISIONS:
        raise DecisionInvalid(
            f"decision must be one of {', '.join(DECISIONS)}",
            {"decision": [f"unknown decision {decision!r}"]},
        )
    return decision


def _lock(approval_id, user) -> tuple[Run, Approval]:
    """The run, then the approval, under their row locks (the order the engine and the expiry
    sweep lock them in), with when `user` first opened the approval."""
    run = _locked_run_of(approval_id)
    approval = (
        Approval.objects.select_for_update()
        .annotate(first_opened_at=_first_opened_by(user))
        .get(pk=approval_id)
    )
    return run, approval


def _check_may_decide(
    approval: Approval, run: Run, user, decision: str, shown_args_hash
) -> Permission:
    """Still open, the call shown is the call waiting, and `user` may decide it (themselves,
    or for whom they act): the permission. Raises otherwise."""
    _check_still_open(approval, run)
    for hold in APPROVAL_HOLDS if decision == "approve" else ():
        held = hold(approval, run)
        if held:
            raise DecisionConflict(held, approval_status=approval.status)
    if decision == "approve" and shown_args_hash is not None:
        _check_shown(approval, shown_args_hash)
    permission = permissions.permission(approval, run, user, decision)
    if permission.why_not:
        raise DecisionForbidden(permission.why_not)
    # With one vote needed, any vote decides: a pending approval has no votes yet.
    if permission.votes_needed > 1:
        _check_not_voted_yet(approval, user)
    return permission


def _record_vote(approval, user, decision, plan, reason, answer, opened, now) -> ApprovalVote:
    return ApprovalVote.objects.create(
        approval=approval,
        user=user,
        username=user.get_username(),
        decision=decision,
        arguments=plan.final_args,
        edited=plan.edited,
        reason=reason,
        answer=answer,
        opened_at=opened,
        decided_at=now,
        seconds_open=(now - opened).total_seconds() if opened else None,
    )


def _decision_step(approval, user, decision, plan, reason, answer, opened, now) -> dict:
    """The decision's step in the run's timeline (status, votes and principal added after)."""
    return {
        "approval": str(approval.pk),
        "kind": approval.kind,
        "decision": decision,
        "by": user.get_username(),
        "tool": approval.tool,
        "args": approval.args,
        "edited_args": plan.final_args if plan.edited else None,
        "reason": reason,
        "answer": answer,
        "opened_at": opened.isoformat() if opened else None,
        "seconds_open": round((now - opened).total_seconds(), 3) if opened else None,
    }


def _count_quorum_vote(approval: Approval, run: Run, step: dict, missing: int) -> Approval:
    """One vote of a quorum: nothing is decided yet, nothing resumes."""
    step["status"] = Approval.Status.PENDING
    step["detail"] = f"{missing} more approval(s) needed"
    run.append_step(Step.Kind.DECISION, step)
    events.publish_approvals_changed(approval.pk)
    return approval


def _settle(approval: Approval, user, plan: _Plan, reason: str, answer: str, now) -> dict:
    """Write the outcome on the approval; the fields written."""
    fields: dict[str, Any] = {
        "status": plan.status,
        "decided_at": now,
        "decided_by": user,
        "reason": reason,
        "answer": answer,
    }
    if plan.status == Approval.Status.APPROVED:
        fields["edited_args"] = plan.final_args if plan.final_args != approval.args else None
        fields["approved_args_hash"] = args_hash(approval.tool, plan.final_args)
    # Compare-and-set: under the locks this always wins, but it is the rule that makes
    # "only a pending approval can be decided" true whatever the caller did before.
    if not Approval.objects.filter(pk=approval.pk, status=Approval.Status.PENDING).update(**fields):
        approval.refresh_from_db()
        raise already_decided(approval)
    return fields


def _after_settled(approval: Approval, run: Run, step: dict, plan: _Plan, user, now, *, edited):
    """What a settled decision sets off: the learning policy hears it (`settled`, inside the
    transaction), the run's step and counter, and after commit the live queue, `decided` and
    the time-to-decide metric."""
    settled.send(sender=Approval, approval=approval, status=plan.status, edited=edited, by=user)
    counter = _outcome_counter(plan.status, edited=edited)
    # The run's outcome counter moves in the step's own write, under the run's lock.
    _append_and_resume(run, step, update={counter: getattr(run, counter) + 1})
    events.publish_approvals_changed(approval.pk)
    transaction.on_commit(lambda: decided.send(sender=Approval, approval_id=approval.pk))
    waited = (now - approval.requested_at).total_seconds()
    transaction.on_commit(
        lambda: metrics.decision_seconds.labels(approval.kind, plan.status).observe(waited)
    )
    wait_traces.record_on_commit(approval, run, status=plan.status, by=step["by"], at=now)


def _locked_run_of(approval_id) -> Run:
    """The approval's run under its row lock, found and locked in one query (with who
    launched it: its live event names them)."""
    try:
        return (
            Run.objects.select_related("launched_by")
            .select_for_update(of=("self",))
            .get(approvals__pk=approval_id)
        )
    except (Run.DoesNotExist, ValueError, ValidationError):  # not a UUID: no such approval
        raise Approval.DoesNotExist(f"no approval {approval_id}") from None


def _first_opened_by(user) -> Subquery:
    return Subquery(
        ApprovalView.objects.filter(approval=OuterRef("pk"), user=user).values("first_opened_at")[
            :1
        ]
    )


def _check_not_voted_yet(approval: Approval, user) -> None:
    earlier = approval.votes.filter(user=user).first()
    if earlier is not None:
        raise DecisionConflict(
            f"you already voted {earlier.decision} at {_when(earlier.decided_at)}; "
            "waiting for other approvers",
            approval_status=approval.status,
            decided_by=earlier.username,
            decided_at=earlier.decided_at,
        )


def _outcome_counter(status: str, *, edited: bool) -> str:
    """The Run counter a decided approval adds to (Run.outcome_badges shows them)."""
    if status == Approval.Status.APPROVED:
        return "edited_count" if edited else "approved_count"
    return {
        Approval.Status.REJECTED: "rejected_count",
        Approval.Status.ANSWERED: "answered_count",
        Approval.Status.EXPIRED: "expired_count",
    }[status]


def _append_and_resume(run: Run, step: dict, *, update: dict) -> None:
    """The decision's step; and the run goes on once nothing of it waits for a person any
    more (a second gated call of the same model turn may still): one write for both. Under
    the run's row lock, so the count is exact."""
    waits = Approval.objects.filter(run=run, status=Approval.Status.PENDING).exists()
    if waits or not run.resume("all decisions made", first=(Step.Kind.DECISION, step, update)):
        run.append_step(Step.Kind.DECISION, step, update=update)


def _check_still_open(approval: Approval, run: Run) -> None:
    if approval.status != Approval.Status.PENDING:
        raise already_decided(approval)
    if run.is_terminal:
        raise DecisionConflict(
            f"the run is already {run.status}; there is nothing left to decide",
            approval_status=approval.status,
        )


def _check_preview(approval: Approval, decision: str, shown_hash: str | None) -> str:
    """An approval's preview, computed again now (the row is locked, the data is as the
    effect will find it, short of writes between now and the call): the hash the approver
    was shown when it is unchanged ("" when there is none), else PreviewChanged. For
    approvals only: a rejection changes nothing."""
    if decision != "approve":
        return ""
    fresh = changed_preview(approval, shown_hash)
    if fresh is not None:
        raise PreviewChanged(fresh)
    return (shown_hash or (approval.preview or {}).get("hash", "")) if approval.preview else ""


def changed_preview(approval: Approval, shown_hash: str | None) -> dict | None:
    """The call's preview computed now, when it is not the one shown (`shown_hash`, else the
    stored one's); None when unchanged, or when the call has no preview."""
    if approval.kind != Approval.Kind.ACTION or not approval.preview:
        return None
    found = approval.tool_object()
    fresh = previews.compute(found.preview if found else None, approval.args or {})
    shown = shown_hash or approval.preview.get("hash", "")
    return fresh if fresh is not None and fresh["hash"] != shown else None


def _check_shown(approval: Approval, shown_args_hash: str) -> None:
    # An approval is consent to one call: the one on the approver's screen. A hash of anything
    # else (another approval's call, a stale or forged page) approves nothing.
    if shown_args_hash != args_hash(approval.tool, approval.args):
        raise DecisionConflict(
            "the call you were shown is not the call waiting for approval; nothing was "
            "approved. Reload the approval and decide on the call it shows.",
            approval_status=approval.status,
        )


def already_decided(approval: Approval) -> DecisionConflict:
    """The refusal of any action on an approval that is no longer pending."""
    who = approval.decided_by.get_username() if approval.decided_by else None
    if approval.status == Approval.Status.EXPIRED:
        message = f"already expired at {_when(approval.decided_at)}"
    elif approval.status == Approval.Status.CANCELLED:
        message = f"its run was cancelled at {_when(approval.decided_at)}; nothing to decide"
        if approval.reason:
            message += f" ({approval.reason})"
    else:
        by = who or "the system"
        message = f"already {approval.status} by {by} at {_when(approval.decided_at)}"
    return DecisionConflict(
        message,
        approval_status=approval.status,
        decided_by=who,
        decided_at=approval.decided_at,
    )


def _when(moment: datetime | None) -> str:
    if moment is None:
        return "an unknown time"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _opened_at(recorded: datetime | None, given: datetime | None, now: datetime) -> datetime | None:
    opened = recorded or given
    if opened is not None and opened > now:
        opened = now  # a client clock ahead of ours must not make a negative time
    return opened


def _plan(
    approval: Approval,
    decision: str,
    arguments: Any,
    reason: str,
    answer: str,
    rules: dict,
    votes_needed: int,
) -> _Plan:
    """What the decision will do, or DecisionInvalid. Reads only; changes nothing."""
    if approval.kind == Approval.Kind.QUESTION:
        if arguments is not None:
            raise DecisionInvalid(
                "questions take an answer, not arguments",
                {"arguments": ["not allowed for a question"]},
            )
        if decision == "approve":
            raise DecisionInvalid(
                "this is a question: answer it (or reject it with a reason)",
                {"decision": ["use answer or reject for a question"]},
            )
        if decision == "reject":
            if approval.side_effect_id:
                raise DecisionInvalid(
                    "say whether the call happened: answer happened or did_not_happen",
                    {"decision": ["an outcome question must be answered"]},
                )
            _require_reason(reason)
            return _Plan(Approval.Status.REJECTED)
        if not answer:
            raise DecisionInvalid("an answer is required", {"answer": ["this field is required"]})
        if len(answer) > 10_000:
            raise DecisionInvalid("the answer is too long", {"answer": ["at most 10000 chars"]})
        if approval.options and answer not in approval.options:
            raise DecisionInvalid(
                f"the answer must be one of: {', '.join(map(str, approval.options))}",
                {"answer": ["not one of the options"]},
            )
        return _Plan(Approval.Status.ANSWERED)

    if decision == "answer":
        raise DecisionInvalid(
            "this is an action: approve or reject it",
            {"decision": ["use approve or reject for an action"]},
        )
    if decision == "reject":
        if arguments is not None:
            raise DecisionInvalid(
                "a rejection takes a reason, not arguments", {"arguments": ["not allowed"]}
            )
        _require_reason(reason)
        return _Plan(Approval.Status.REJECTED)

    if arguments is None:
        return _Plan(Approval.Status.APPROVED, final_args=approval.args)
    edited = validated_edit(approval, arguments, rules, votes_needed=votes_needed)
    return _Plan(Approval.Status.APPROVED, final_args=edited, edited=edited != approval.args)


def validated_edit(approval: Approval, arguments: Any, rules: dict, *, votes_needed: int) -> dict:
    """The arguments an edit-and-approve of `arguments` would execute, or DecisionInvalid.

    Validated against the tool's schema and the agent's gate policy; an edit that changes
    nothing returns the proposed arguments themselves. Reads only: the decision and the
    approval screen's preview of the edit both call it, so the preview shows what would run.
    """
    current = approval.args
    tool = approval.tool_object()
    if tool is None:
        raise DecisionInvalid(
            f"the tool {approval.tool!r} is no longer registered; arguments cannot be edited",
            {"arguments": ["unknown tool"]},
        )
    try:
        edited = tool.validate(arguments)
    except ToolArgsError as exc:
        errors: dict[str, list[str]] = {}
        for err in exc.errors:
            key = ".".join(str(p) for p in err["loc"]) or "arguments"
            errors.setdefault(key, []).append(err["msg"])
        raise DecisionInvalid(str(exc), errors or {"arguments": [str(exc)]}) from None
    if args_hash(tool.name, edited) == args_hash(tool.name, current):
        return current
    if approval.kind == Approval.Kind.PLAN:
        problems = plan_edits.check_edit(current, edited)
        if problems:
            raise DecisionInvalid(
                "edit refused: " + "; ".join(m for ms in problems.values() for m in ms), problems
            )
    if votes_needed > 1:
        # Every voter must approve the call they were shown; an edit midway would have the
        # others approve something they never saw.
        raise DecisionInvalid(
            "this gate needs several approvers, so its arguments cannot be edited: approve the "
            "proposed call, or reject it with a reason so the agent proposes another",
            {"arguments": ["edits are not possible on a quorum gate"]},
        )
    problems = escalations(tool, approval.args, edited, rules)
    if problems:
        raise DecisionInvalid(
            "edit refused: policy would gate the edited call harder than the proposed one ("
            + "; ".join(problems)
            + "). Approve the proposed arguments, edit within the limits, or reject with a "
            "reason so the agent can propose it itself.",
            {"arguments": problems},
        )
    return edited


def _require_reason(reason: str) -> None:
    if not reason:
        raise DecisionInvalid(
            "a reason is required to reject (the agent is told it)",
            {"reason": ["this field is required"]},
        )
    if len(reason) > 5000:
        raise DecisionInvalid("the reason is too long", {"reason": ["at most 5000 chars"]})


def escalations(tool: Tool, original: dict, edited: dict, rules: dict) -> list[str]:
    """Ways the edited call is riskier in policy terms than the proposed one (empty: none).

    Each argument rule is asked of the gate policy on its own (against a copy of the tool with
    no risk of its own, so only that rule can gate), which keeps what "over the limit" and "on
    the allow-list" mean in gates/policy.py. Sampling is off, so the answer is deterministic.
    """
    problems: list[str] = []
    for arg, limit in (rules.get("thresholds") or {}).get(tool.name, {}).items():
        if not _rule_gates(tool, edited, "thresholds", arg, limit):
            continue
        new, old = _number(edited.get(arg)), _number(original.get(arg))
        if not _rule_gates(tool, original, "thresholds", arg, limit) or (
            new is None or old is None or new > old
        ):
            problems.append(
                f"{arg} {edited.get(arg)} exceeds the limit of {limit} "
                f"(proposed: {original.get(arg)})"
            )
    for arg, allowed in (rules.get("allow_lists") or {}).get(tool.name, {}).items():
        if edited.get(arg) != original.get(arg) and _rule_gates(
            tool, edited, "allow_lists", arg, allowed
        ):
            problems.append(f"{arg} {edited.get(arg)!r} is not on the allow-list")
    quiet = {**rules, "sample_rate": 0}
    before = declared_policy.evaluate(tool=tool, args=original, rules=quiet)
    after = declared_policy.evaluate(tool=tool, args=edited, rules=quiet)
    if after.gated and rank(after.risk) > rank(before.risk):
        problems.append(f"the risk rises from {before.risk} to {after.risk}: {after.explanation}")
    elif after.gated and not before.gated and not problems:
        problems.append(f"policy gates the edited call: {after.explanation}")
    return problems


def _rule_gates(tool: Tool, args: dict, kind: str, arg: str, rule: Any) -> bool:
    riskless = replace(tool, reversible=True, blast=Blast.NONE)
    rules = {kind: {tool.name: {arg: rule}}, "sample_rate": 0}
    return declared_policy.evaluate(tool=riskless, args=args, rules=rules).gated


def _number(value: Any) -> Decimal | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None


# --- a cancelled run ---------------------------------------------------------------------------
def on_run_cancelled(sender, run: Run, by: str | None = None, **kwargs) -> int:
    """Its run was cancelled: nothing it waited for can be decided any more (the
    runs.models.run_cancelled signal, inside the cancel's transaction, the run locked). Each
    withdrawn approval's wait ends in the trace, cancelled, by whoever cancelled the run.
    Returns how many were cancelled."""
    now = timezone.now()
    ids = list(Approval.objects.pending().filter(run=run).values_list("pk", flat=True))
    Approval.objects.filter(pk__in=ids, status=Approval.Status.PENDING).update(
        status=Approval.Status.CANCELLED, decided_at=now
    )
    for approval_id in ids:
        events.publish_approvals_changed(approval_id)
    wait_traces.record_withdrawn_on_commit(ids, run, by=by or "", at=now, cause="run cancelled")
    return len(ids)


# --- expiry ----------------------------------------------------------------------------------
HALTED = "halted: "


def expire_due(now: datetime | None = None, *, batch: int = 500) -> int:
    """Expire pending approvals past their deadline and apply each one's `on_expiry`: reject
    (the run resumes and the agent is told the call was not executed), fail (the engine fails
    the run) or halt (the run stays parked, its status line says it is halted, until an
    operator resumes or cancels it: `resume_halted`). Returns how many expired."""
    now = now or timezone.now()
    due = list(
        Approval.objects.pending()
        .filter(expires_at__lte=now)
        .order_by("expires_at")
        .values_list("pk", "run_id", "on_expiry")[:batch]
    )
    expired = 0
    for approval_id, run_id, on_expiry in due:
        with transaction.atomic():
            run = Run.locked(run_id)
            if on_expiry == "halt" and run.status == Run.Status.RUNNING:
                # Gated but not parked yet (its worker is between the gate and the pause):
                # a halt needs the run parked, so the next sweep expires it.
                continue
            # Compare-and-set: a decision that won the lock first keeps its outcome.
            if not Approval.objects.filter(
                pk=approval_id, status=Approval.Status.PENDING, expires_at__lte=now
            ).update(status=Approval.Status.EXPIRED, decided_at=now):
                continue
            expired += 1
            approval = Approval.objects.get(pk=approval_id)
            events.publish_approvals_changed(approval.pk)
            transaction.on_commit(
                lambda pk=approval.pk: decided.send(sender=Approval, approval_id=pk)
            )
            transaction.on_commit(metrics.approvals_expired.labels(approval.kind).inc)
            wait_traces.record_on_commit(
                approval, run, status=Approval.Status.EXPIRED, by="", at=now
            )
            if run.is_terminal:
                continue  # the run ended without it (cancelled): nothing left to apply
            step = {
                "approval": str(approval.pk),
                "kind": approval.kind,
                "decision": "expire",
                "status": Approval.Status.EXPIRED,
                "by": None,
                "tool": approval.tool,
                "args": approval.args,
                "on_expiry": approval.on_expiry,
                "detail": f"no decision by {_when(approval.expires_at)}: "
                + _EXPIRY_OUTCOMES.get(approval.on_expiry, _EXPIRY_OUTCOMES["reject"]),
            }
            update = {"expired_count": run.expired_count + 1}
            if approval.on_expiry == "halt":
                _halt(run, approval, step, update)
            else:
                _append_and_resume(run, step, update=update)
    return expired


_EXPIRY_OUTCOMES = {
    "reject": "the agent is told it was not executed",
    "fail": "the run fails",
    "halt": "the run halts until an operator resumes or cancels it",
}


def _halt(run: Run, approval: Approval, step: dict, update: dict) -> None:
    """The expiry's step, and the run stays parked with a status line that says it is halted
    and why (`is_halted`); it is not sent to a worker."""
    what = approval.tool or "a question"
    update["status_detail"] = (
        f"{HALTED}nobody decided {what} by {_when(approval.expires_at)}; "
        "resume the run or cancel it"
    )[:500]
    run.append_step(Step.Kind.DECISION, step, update=update)


def is_halted(run: Run) -> bool:
    """Whether the run is halted by an expiry and waits for an operator (nothing else left to
    decide in it)."""
    return (
        run.status == Run.Status.WAITING
        and run.status_detail.startswith(HALTED)
        and not Approval.objects.filter(run=run, status=Approval.Status.PENDING).exists()
    )


def may_resume_halted(user) -> bool:
    """Operators (who run agents) and approvers (who let the approval expire) may."""
    return bool(user and user.is_authenticated and (user.can_operate or user.can_approve))


def resume_halted(run_id, *, user) -> Run:
    """An operator resumes a run an expiry halted: the engine then tells the agent the call
    was not executed, and the run goes on. DecisionForbidden for other roles, DecisionConflict
    when the run is not halted (resumed or cancelled by someone else first)."""
    if not may_resume_halted(user):
        raise DecisionForbidden("only operators and approvers can resume a halted run")
    with transaction.atomic():
        run = Run.locked(run_id)
        if not (
            teams.may(user, teams.Power.LAUNCH, run.agent)
            or teams.may(user, teams.Power.DECIDE, run.agent)
        ):
            raise DecisionForbidden(f"your teams may not resume runs of {run.agent}")
        if not is_halted(run):
            raise DecisionConflict(
                f"the run is not halted (it is {run.status}"
                + (f": {run.status_detail}" if run.status_detail else "")
                + "); nothing to resume"
            )
        run.resume(
            f"resumed by {user.get_username()} after a halt at an approval's expiry",
            by=user.get_username(),
        )
    run.refresh_from_db()
    return run
