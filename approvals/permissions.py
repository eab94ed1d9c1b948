"""Who may decide an approval: every rule about it, in one place.
Why and how: docs/design/modules.md."""

from dataclasses import dataclass, field
from typing import Any

from accounts import teams
from runs.models import Run

from .gates.policy import rank
from .models import Approval, Delegation, Escalation

ONLY_APPROVERS = "only approvers and admins can decide approvals"


def can_decide(user) -> bool:
    """The role rule: approvers and admins decide; nobody else, whatever the agent says."""
    return user is not None and user.is_authenticated and user.can_approve


def outside_teams(run: Run, user) -> str:
    """The team rule (accounts/teams.py): why the user's teams do not decide for this run's
    agent, or "". Neither a named approver nor a delegation reaches past it."""
    if teams.may(user, teams.Power.DECIDE, run.agent):
        return ""
    return f"your teams do not decide the approvals of {run.agent}"


def gate_rules(run: Run) -> dict:
    return run.agent_config.get("gates", {}) or {}


@dataclass(frozen=True)
class Permission:
    """The answer to "may this person make this decision on this approval, and why not"."""

    why_not: str  # "" when they may
    acting_for: Any = None  # the delegator they decide for, when they may only through them
    votes_needed: int = 1  # distinct approvers the approval needs before it is decided
    rules: dict = field(default_factory=dict)  # the agent's gate rules the answer read


def permission(approval: Approval, run: Run, user, decision: str) -> Permission:
    """May `user` make `decision` on this approval (themselves, or for whom they act through a
    delegation), and why not; with how many approvers it needs."""
    rules = gate_rules(run)
    needed = votes_needed(approval, rules)
    why = forbidden_reason(approval, run, user, decision)
    if not why:
        return Permission("", None, needed, rules)
    principal = acting_for(approval, run, user, decision)
    return Permission("" if principal is not None else why, principal, needed, rules)


def votes_needed(approval: Approval, rules: dict) -> int:
    """Distinct approvers an action needs: the agent's quorum at or above `quorum_from`."""
    quorum_from = rules.get("quorum_from") or ""
    if approval.kind != Approval.Kind.ACTION or not quorum_from:
        return 1
    if rank(approval.risk) < rank(quorum_from):
        return 1
    return max(1, int(rules.get("quorum") or 2))


def forbidden_reason(approval: Approval, run: Run, user, decision: str = "approve") -> str:
    """Why `user` may not make `decision` on this approval, or "" if they may."""
    if not can_decide(user):
        return ONLY_APPROVERS
    if outside := outside_teams(run, user):
        return outside
    rules = gate_rules(run)
    named = rules.get("approvers") or []
    if (
        named
        and user.get_username() not in named
        # An escalation tier told about it may decide it too.
        and not (rules.get("escalation") and user.get_username() in escalated_to(approval))
    ):
        return f"only this agent's named approvers can decide: {', '.join(named)}"
    return _four_eyes_reason(approval, run, user, decision)


def _four_eyes_reason(approval: Approval, run: Run, user, decision: str) -> str:
    four_eyes_from = gate_rules(run).get("four_eyes_from") or ""
    if (
        decision != "reject"
        and four_eyes_from
        and run.launched_by_id is not None
        and run.launched_by_id == user.pk
        and rank(approval.risk) >= rank(four_eyes_from)
    ):
        return (
            f"four-eyes rule: you launched this run, so you cannot approve a {approval.risk}-risk "
            f"action in it (from {four_eyes_from} up another approver must decide)"
        )
    return ""


def acting_for(approval: Approval, run: Run, user, decision: str):
    """Whom `user` decides for through an active Delegation, when they may not decide this
    themselves: the first delegator who could. None if nobody. The delegate's own four-eyes
    rule still holds, and a quorum needs each approver's own vote, so delegates do not vote
    on one."""
    if _four_eyes_reason(approval, run, user, decision) or outside_teams(run, user):
        return None
    if votes_needed(approval, gate_rules(run)) > 1:
        return None
    delegations = Delegation.objects.active().filter(delegate=user).select_related("user")
    for delegation in delegations.order_by("starts"):
        if not forbidden_reason(approval, run, delegation.user, decision):
            return delegation.user
    return None


def may_approve(approval: Approval, run: Run, user) -> bool:
    """Whether `user` may approve it, themselves or for someone they act for."""
    if not forbidden_reason(approval, run, user, "approve"):
        return True
    return acting_for(approval, run, user, "approve") is not None


def may_decide(approval: Approval, user) -> bool:
    """For lists ("assigned to me"): pending, allowed, and not already voted by this user."""
    if approval.status != Approval.Status.PENDING or approval.run.is_terminal:
        return False
    if not may_approve(approval, approval.run, user):
        return False
    return not approval.votes.filter(user=user).exists()


def escalated_to(approval: Approval) -> set[str]:
    """Everyone an escalation tier has been told about this approval (they may decide it)."""
    names: set[str] = set()
    for people in Escalation.objects.filter(approval=approval).values_list("notified", flat=True):
        names.update(people or [])
    return names
