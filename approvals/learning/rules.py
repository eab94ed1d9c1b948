"""The gate policy learns from its approvers: earned auto-approval, with revocation.
Why and how: docs/design/modules.md."""

import hashlib
import logging
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agentkit import agents
from agentkit.tools import Blast, Tool, get_tool
from runs.models import canonical_json

from ..gates import policy as declared_policy
from ..models import Approval
from .models import AutoApproveRule, GateOverride, RuleHit, TrackRecord
from .tell_admins import tell_admins_on_commit

log = logging.getLogger("agentops.approvals")

# A pattern is a list of conditions, each {"arg": name, "op": "lte" | "eq", "value": ...}.
Pattern = list[dict]


def switched_on() -> bool:
    return bool(settings.AGENTOPS.get("LEARNING_POLICY", True))


def declared(rules: dict) -> dict | None:
    """The agent's LearningRules (as_dict), or None when it does not learn."""
    learning = rules.get("learning")
    return learning if learning and switched_on() else None


def never_auto(tool: Tool, risk: str | None = None) -> bool:
    """Irreversible calls of high or critical risk are never auto-approved."""
    worst = max(tool.blast, declared_policy.BLAST_BY_LABEL.get(risk or "", Blast.NONE))
    return not tool.reversible and worst >= Blast.HIGH


def eligible(tool: Tool | None, rules: dict, risk: str | None = None) -> bool:
    """Whether calls of this tool can earn (or use) a rule: the base table gates them (a rule
    waives nothing else), the agent did not ask to gate them always, they are not
    irreversible at high risk, and their risk does not call for a quorum of approvers (one
    rule is not several people)."""
    if tool is None or never_auto(tool, risk):
        return False
    quorum_from = declared_policy.BLAST_BY_LABEL.get(rules.get("quorum_from") or "")
    worst = max(tool.blast, declared_policy.BLAST_BY_LABEL.get(risk or "", Blast.NONE))
    if quorum_from is not None and worst >= quorum_from:
        return False
    listed = [*(rules.get("always_gate") or ()), *(rules.get("never_gate") or ())]
    if tool.name in listed:
        return False
    return declared_policy.base_outcome(tool)[0] == declared_policy.GATE


# --- patterns ---------------------------------------------------------------------------------


def patterns(tool: Tool, args: dict, rules: dict, learning: dict) -> list[Pattern]:
    """Every pattern this call falls in, narrowest first; [] when it cannot be learned (an
    amount that is not a number, or above every band)."""
    fields = (learning.get("match_fields") or {}).get(tool.name) or []
    equal = [{"arg": f, "op": "eq", "value": args.get(f)} for f in fields]
    limits = (rules.get("thresholds") or {}).get(tool.name) or {}
    if not limits:
        return [equal]
    found = []
    for band in sorted(float(b) for b in learning.get("bands") or [1.0]):
        conditions = []
        for arg, limit in sorted(limits.items()):
            bound = declared_policy._number(limit)
            value = declared_policy._number(args.get(arg))
            if bound is None or value is None:
                return []
            top = (bound * Decimal(str(band))).quantize(Decimal("0.01"))
            if value > top:
                break
            conditions.append({"arg": arg, "op": "lte", "value": declared_policy._fmt(top)})
        else:
            found.append(conditions + equal)
    return found


def key(pattern: Pattern) -> str:
    """A fixed-length key for a pattern (equality values may be long text)."""
    return hashlib.sha256(canonical_json(pattern).encode()).hexdigest()


def matches(pattern: Pattern, args: dict) -> bool:
    for c in pattern:
        if c["op"] == "lte":
            value, bound = (
                declared_policy._number(args.get(c["arg"])),
                declared_policy._number(c["value"]),
            )
            if value is None or bound is None or value > bound:
                return False
        elif c["op"] == "eq":
            if args.get(c["arg"]) != c["value"]:
                return False
        else:
            return False  # a condition we do not know cannot be met
    return True


def covers(wider: Pattern, narrower: Pattern) -> bool:
    """Whether every call in `narrower` is also in `wider` (same fields, bounds at least)."""
    eq_w = {(c["arg"], canonical_json(c["value"])) for c in wider if c["op"] == "eq"}
    eq_n = {(c["arg"], canonical_json(c["value"])) for c in narrower if c["op"] == "eq"}
    if eq_w != eq_n:
        return False
    lte_n = {c["arg"]: declared_policy._number(c["value"]) for c in narrower if c["op"] == "lte"}
    for c in wider:
        if c["op"] == "lte":
            bound = lte_n.get(c["arg"])
            if bound is None or bound > declared_policy._number(c["value"]):
                return False
    return True


def describe(tool: str, pattern: Pattern) -> str:
    """ "issue_goodwill_credit: amount <= 20, reason = 'late delivery'" """
    parts = [
        f"{c['arg']} {'<=' if c['op'] == 'lte' else '='} "
        + (str(c["value"]) if c["op"] == "lte" else repr(c["value"]))
        for c in pattern
    ]
    return f"{tool}: {', '.join(parts) if parts else 'any arguments'}"


# --- matching (the gate policy asks, without writing) ------------------------------------------


def in_scope(rule: AutoApproveRule, now: datetime | None = None) -> bool:
    now = now or timezone.now()
    return (
        rule.status == AutoApproveRule.Status.ACTIVE
        and rule.expires_at is not None
        and rule.expires_at > now
        and rule.max_hits is not None
        and rule.hits < rule.max_hits
    )


def covering_rule(agent: str, tool: Tool, args: dict, risk: str) -> AutoApproveRule | None:
    """The active, in-scope rule that covers this call, or None. Checked again here (not
    only when proposed) so no rule ever covers an irreversible high-risk call."""
    if not switched_on() or never_auto(tool, risk):
        return None
    now = timezone.now()
    for rule in AutoApproveRule.objects.filter(
        agent=agent, tool=tool.name, status=AutoApproveRule.Status.ACTIVE, expires_at__gt=now
    ).order_by("id"):
        if in_scope(rule, now) and matches(rule.pattern, args):
            return rule
    return None


def overridden(agent: str, tool: str) -> GateOverride | None:
    """A reviewer's "should have been gated" that an admin has not cleared yet."""
    return GateOverride.objects.filter(agent=agent, tool=tool, cleared_at__isnull=True).first()


def use_rule(rule_id: int, args: dict, tool: Tool, risk: str) -> AutoApproveRule | None:
    """Lock the rule and count a hit if it still covers the call (it may have been revoked
    since the policy looked); None means a person must decide after all."""
    rule = AutoApproveRule.objects.select_for_update().filter(pk=rule_id).first()
    if rule is None or not in_scope(rule) or not matches(rule.pattern, args):
        return None
    if not switched_on() or never_auto(tool, risk):
        return None
    rule.count_hit()
    rule.hits += 1
    return rule


# --- learning from decisions -------------------------------------------------------------------


def on_settled(sender, approval, *, status: str, edited: bool, by, **kwargs) -> None:
    """decisions.settled (connected in approvals/apps.py): a person's decision settled an
    approval."""
    record_decision(approval, status=status, edited=edited, by=by)


def record_decision(approval, *, status: str, edited: bool, by) -> None:
    """Called (through decisions.settled) inside the decision's transaction, once a person has
    decided an action. Revokes the rules a rejection or edit contradicts, then moves the track
    records and proposes a rule where a record has reached the bar."""
    if approval.kind != "action" or not approval.tool:
        return
    rules = approval.run.agent_config.get("gates", {})
    tool = get_tool(approval.tool)
    approved = status == "approved"
    if not approved or edited:
        _revoke_contradicted(approval, tool, by=by, edited=edited and approved)
    if status not in ("approved", "rejected"):
        return
    learning = declared(rules)
    if learning is None or not eligible(tool, rules, approval.risk):
        return
    agent = approval.run.agent
    now = timezone.now()
    narrowest = None
    for pattern in patterns(tool, approval.args, rules, learning):
        record, _ = TrackRecord.objects.select_for_update().get_or_create(
            agent=agent, tool=tool.name, pattern_key=key(pattern), defaults={"pattern": pattern}
        )
        if approved and not edited:
            record.streak += 1
            record.approvals += 1
            record.evidence = [*record.evidence, str(approval.pk)][-int(learning["bar"]) :]
        else:
            record.streak = 0
            record.evidence = []
            record.edits += int(edited)
            record.rejections += int(not approved)
        record.updated_at = now
        record.save()
        narrowest = narrowest or record
    # Only the narrowest pattern the call falls in may be proposed: a wider band is proposed
    # when calls in it (not only in a narrower one) have earned it.
    if narrowest is not None and narrowest.streak >= int(learning["bar"]):
        _propose(narrowest)


def _propose(record: TrackRecord) -> AutoApproveRule | None:
    """A proposal from a record at the bar, unless a proposed or active rule covers it or
    another proposal for the same fields waits for an admin."""
    existing = AutoApproveRule.objects.filter(
        agent=record.agent,
        tool=record.tool,
        status__in=[AutoApproveRule.Status.PROPOSED, AutoApproveRule.Status.ACTIVE],
    )
    for rule in existing:
        if covers(rule.pattern, record.pattern):
            return None
        if rule.status == AutoApproveRule.Status.PROPOSED and _same_fields(rule, record):
            return None
    rule = AutoApproveRule.objects.create(
        agent=record.agent,
        tool=record.tool,
        pattern_key=record.pattern_key,
        pattern=record.pattern,
        evidence=list(record.evidence),
    )
    rule.events.create(
        from_status="",
        to_status=AutoApproveRule.Status.PROPOSED,
        cause=f"{record.streak} consecutive approvals without an edit",
    )
    _tell_admins(
        f"Auto-approve rule #{rule.pk} proposed: {describe(rule.tool, rule.pattern)}",
        f"Agent {rule.agent}: {record.streak} consecutive approvals without an edit. "
        "Nothing changes until an admin accepts it.",
    )
    return rule


def _same_fields(rule: AutoApproveRule, record: TrackRecord) -> bool:
    def eq(pattern: Pattern) -> str:
        return canonical_json(sorted((c["arg"], c["value"]) for c in pattern if c["op"] == "eq"))

    return eq(rule.pattern) == eq(record.pattern)


def _revoke_contradicted(approval, tool: Tool | None, *, by, edited: bool) -> None:
    """A person rejected or edited a call: every active rule that covers it is revoked (the
    rule said such calls need nobody; a person just said otherwise)."""
    what = "edited" if edited else "rejected"
    who = by.get_username() if by is not None else "the system"
    checked = RuleHit.objects.filter(approval=approval, checked=True).values_list("rule", flat=True)
    candidates = AutoApproveRule.objects.filter(
        Q(pk__in=list(checked)) | Q(agent=approval.run.agent, tool=approval.tool),
        status=AutoApproveRule.Status.ACTIVE,
    ).select_for_update()
    for rule in candidates:
        if rule.pk in checked or matches(rule.pattern, approval.args):
            check = " in a sampled check" if rule.pk in checked else ""
            revoke(
                rule,
                cause=f"{who} {what} a call it covers{check} (approval {approval.pk})",
                approval=approval,
            )


# --- an admin's acts and the system's -----------------------------------------------------------


class RuleError(Exception):
    """The rule cannot move that way (a clear message for the page)."""


def accept(rule: AutoApproveRule, *, by, expires_at: datetime, max_hits: int) -> None:
    tool = get_tool(rule.tool)
    if tool is None or never_auto(tool):
        raise RuleError("calls of this tool are never auto-approved")
    if expires_at <= timezone.now():
        raise RuleError("the expiry must be in the future")
    if max_hits < 1:
        raise RuleError("the rule must allow at least one call")
    if not rule.transition_to(
        AutoApproveRule.Status.ACTIVE,
        by=by,
        cause=f"accepted for at most {max_hits} calls until {expires_at:%Y-%m-%d %H:%M} UTC",
        accepted_by=by,
        accepted_at=timezone.now(),
        expires_at=expires_at,
        max_hits=max_hits,
    ):
        raise RuleError(f"rule #{rule.pk} is {rule.status}, not proposed")


def decline(rule: AutoApproveRule, *, by, cause: str) -> None:
    if not rule.transition_to(AutoApproveRule.Status.DECLINED, by=by, cause=cause or "declined"):
        raise RuleError(f"rule #{rule.pk} is {rule.status}, not proposed")
    _restart_record(rule)


def revoke(rule: AutoApproveRule, *, cause: str, by=None, approval=None) -> bool:
    """Revoke an active rule (audited, admins told); False if it was no longer active."""
    if not rule.transition_to(
        AutoApproveRule.Status.REVOKED, by=by, cause=cause, approval=approval
    ):
        return False
    _restart_record(rule)
    _tell_admins(
        f"Auto-approve rule #{rule.pk} revoked: {describe(rule.tool, rule.pattern)}",
        f"Agent {rule.agent}. Cause: {cause}. Its calls go to a person again.",
    )
    return True


def expire_due(now: datetime | None = None) -> int:
    """Expire active rules past their expiry or their cap (the approvals sweep calls this)."""
    now = now or timezone.now()
    count = 0
    for rule in AutoApproveRule.objects.filter(status=AutoApproveRule.Status.ACTIVE):
        if in_scope(rule, now):
            continue
        cause = (
            f"reached its cap of {rule.max_hits} calls"
            if rule.max_hits is not None and rule.hits >= rule.max_hits
            else "reached its expiry"
        )
        with transaction.atomic():
            if rule.transition_to(AutoApproveRule.Status.EXPIRED, cause=cause):
                _restart_record(rule)
                _tell_admins(
                    f"Auto-approve rule #{rule.pk} expired: {describe(rule.tool, rule.pattern)}",
                    f"Agent {rule.agent}: {cause}. Its calls go to a person again.",
                )
                count += 1
    return count


def _restart_record(rule: AutoApproveRule) -> None:
    # A declined or ended rule is earned again from scratch, not re-proposed at once.
    TrackRecord.objects.filter(
        agent=rule.agent, tool=rule.tool, pattern_key=rule.pattern_key
    ).update(streak=0, evidence=[], updated_at=timezone.now())


def default_scope(rule: AutoApproveRule) -> tuple[timedelta, int]:
    """The expiry and cap the accept form offers, from the agent's declaration."""
    agent = agents.get_agent(rule.agent)
    learning = agent.gates.learning if agent is not None and agent.gates.learning else None
    if learning is None:
        return timedelta(days=30), 500
    return learning.default_expiry, learning.default_max_hits


def _tell_admins(subject: str, body: str) -> None:
    tell_admins_on_commit(subject, body)


def evidence_calls(rule: AutoApproveRule) -> list[Approval]:
    found = {str(a.pk): a for a in Approval.objects.filter(pk__in=rule.evidence)}
    return [found[i] for i in rule.evidence if i in found]
