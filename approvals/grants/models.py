"""Standing grants: an approver allows more than the one call on the card.
Why and how: docs/design/modules.md."""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from accounts import teams

from .. import decisions, permissions
from ..evidence.card import pii_findings
from ..gates import policy as declared_policy
from ..models import Approval, Grant
from . import rules as grant_rules
from .rules import envelope_problems, gate_refusal, matches

MAX_DURATION = timedelta(days=7)
MAX_USES = 1000


class GrantRefused(Exception):
    """The grant cannot be made: `message` says why, `errors` per field; `status` for HTTP."""

    def __init__(self, message: str, errors: dict[str, list[str]] | None = None, status=422):
        super().__init__(message)
        self.message = message
        self.errors = errors or {}
        self.status = status


@dataclass(frozen=True)
class Bounds:
    """What an approver asks for: the scope, the envelope and the limits."""

    scope: str
    envelope: list[dict]
    expires_at: datetime | None = None
    max_uses: int | None = None
    note: str = ""


# --- what may be granted -----------------------------------------------------------------------
def refusal(approval: Approval, findings: list | None = None) -> str:
    """Why calls like this approval's cannot be granted ("" when they can)."""
    if approval.kind != Approval.Kind.ACTION or not approval.tool or approval.side_effect_id:
        return "only a gated tool call can be granted; questions are answered each time"
    return grant_rules.refusal(
        risk=approval.risk,
        sampled=approval.sampled,
        pii=bool(findings),
        rules=permissions.gate_rules(approval.run),
    )


def describe(grant: Grant) -> str:
    """The grant in one line: "issue_credit while amount <= 50, this agent, 3 of 10 used,
    until 2026-01-31 12:00 UTC"."""
    parts = [grant.tool]
    if grant.envelope:
        parts.append("while " + " and ".join(_condition(c) for c in grant.envelope))
    parts.append(
        f"for the rest of run {str(grant.run_id)[:8]}"
        if grant.scope == Grant.Scope.RUN
        else f"for agent {grant.agent}"
    )
    if grant.max_uses is not None:
        parts.append(f"{grant.uses} of {grant.max_uses} calls used")
    if grant.expires_at is not None:
        parts.append(f"until {grant.expires_at:%Y-%m-%d %H:%M} UTC")
    return ", ".join(parts)


def _condition(c: dict) -> str:
    return f"{c.get('arg')} {'<=' if c.get('op') == 'lte' else '='} {c.get('value')}"


# --- active grants -----------------------------------------------------------------------------
def _unspent(now: datetime) -> Q:
    """Not revoked, not expired, not used up: conditions on the grant's own row only."""
    return (
        Q(revoked_at__isnull=True)
        & (Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        & (Q(max_uses__isnull=True) | Q(uses__lt=F("max_uses")))
    )


def _usable(now: datetime) -> Q:
    # A run-scoped grant also ends with its run.
    return _unspent(now) & (
        Q(scope=Grant.Scope.AGENT) | Q(run__status__in=("queued", "running", "waiting"))
    )


def visible_to(user, found=None):
    """The grants of the agents whose approvals `user` may decide (accounts/teams.py): what
    the grants page and API list and what they may revoke."""
    found = Grant.objects.all() if found is None else found
    return found.filter(teams.scope(user, teams.Power.DECIDE).q("agent"))


def active(now: datetime | None = None):
    """Grants that can still let a call through."""
    return Grant.objects.filter(_usable(now or timezone.now()))


def applying_to(approval: Approval, now: datetime | None = None) -> list[Grant]:
    """The active grants for this approval's agent and tool that could cover its run's calls
    (for the card; whether one covers a given call also depends on its envelope)."""
    run_scope = Q(scope=Grant.Scope.RUN, run=approval.run_id)
    return list(
        active(now)
        .filter(agent=approval.run.agent, tool=approval.tool)
        .filter(run_scope | Q(scope=Grant.Scope.AGENT))
        .order_by("-scope", "id")
    )


def is_active(grant: Grant, now: datetime | None = None) -> bool:
    return active(now).filter(pk=grant.pk).exists()


# --- granting, using, revoking -----------------------------------------------------------------
def check_bounds(approval: Approval, bounds: Bounds, now: datetime) -> dict[str, list[str]]:
    """Per-field problems with what was asked; {} when it may be granted as asked."""
    errors: dict[str, list[str]] = {}
    if bounds.scope not in Grant.Scope.values:
        errors["scope"] = ["run (the rest of this run) or agent (this agent)"]
    errors.update(envelope_problems(approval.tool_object(), bounds.envelope))
    if bounds.expires_at is not None:
        if bounds.expires_at <= now:
            errors.setdefault("expires_at", []).append("must be in the future")
        elif bounds.expires_at > now + MAX_DURATION:
            errors.setdefault("expires_at", []).append(f"at most {MAX_DURATION.days} days from now")
    if bounds.max_uses is not None and not 1 <= bounds.max_uses <= MAX_USES:
        errors["max_uses"] = [f"between 1 and {MAX_USES}"]
    if bounds.scope == Grant.Scope.AGENT and bounds.expires_at is None and bounds.max_uses is None:
        errors["scope"] = ["a grant for the whole agent needs an expiry or a number of calls"]
    if len(bounds.note) > 500:
        errors["note"] = ["at most 500 characters"]
    return errors


def grant(
    approval_id, *, user, bounds: Bounds, shown_args_hash: str | None = None, via: str = "web"
) -> tuple[Grant, Approval]:
    """Approve the call on the card (it must still be pending) and allow calls like it within
    `bounds`, in one transaction: both or neither. `shown_args_hash` is the call the approver
    was shown, as for any approval. Raises GrantRefused (nothing changed), Approval.DoesNotExist,
    or the decision service's errors (approvals/decisions.py) for the approval itself."""
    now = timezone.now()
    if not permissions.can_decide(user):
        raise GrantRefused(permissions.ONLY_APPROVERS, status=403)
    with transaction.atomic():
        approval = (
            Approval.objects.select_related("run").filter(pk=approval_id).first()
            if _is_uuid(approval_id)
            else None
        )
        if approval is None:
            raise Approval.DoesNotExist(f"no approval {approval_id}")
        if approval.status != Approval.Status.PENDING:
            # A grant is consent given while deciding one call: like any other action on a
            # decided approval (even an approved one), it is refused and changes nothing.
            conflict = decisions.already_decided(approval)
            conflict.message += "; a grant is made only while deciding a pending call"
            raise conflict
        why = refusal(approval, pii_findings(approval))
        if why:
            raise GrantRefused(why, {"scope": [why]})
        forbidden = permissions.forbidden_reason(approval, approval.run, user, "approve")
        if forbidden:
            raise GrantRefused(forbidden, status=403)
        errors = check_bounds(approval, bounds, now)
        if errors:
            raise GrantRefused("the grant cannot be made as asked", errors)
        if bounds.scope == Grant.Scope.RUN and approval.run.is_terminal:
            raise GrantRefused(
                f"the run is already {approval.run.status}: there is no rest of it to grant",
                {"scope": ["the run has ended"]},
                status=409,
            )
        approval = decisions.decide(
            approval.pk,
            user=user,
            decision="approve",
            shown_args_hash=shown_args_hash,
            reason=f"approved with a standing grant ({_scope_words(bounds)})",
            via=via,
        )
        made = Grant.objects.create(
            scope=bounds.scope,
            agent=approval.run.agent,
            run=approval.run if bounds.scope == Grant.Scope.RUN else None,
            tool=approval.tool,
            envelope=bounds.envelope,
            expires_at=bounds.expires_at,
            max_uses=bounds.max_uses,
            granted_by=user,
            granted_by_name=user.get_username(),
            granted_at=now,
            from_approval=approval,
            note=bounds.note,
        )
    return made, approval


def _scope_words(bounds: Bounds) -> str:
    return "the rest of this run" if bounds.scope == Grant.Scope.RUN else "this agent"


def _is_uuid(value) -> bool:
    try:
        Approval._meta.pk.to_python(value)
    except Exception:
        return False
    return True


def use_for(run, item: dict, gate: dict) -> Grant | None:
    """The grant that lets this gated call through, its use counted; None when none does (a
    person decides). Call inside the engine's transaction: the use commits with the approval
    it creates."""
    rules = permissions.gate_rules(run)
    if gate_refusal(gate, rules):
        return None
    now = timezone.now()
    candidates = (
        active(now)
        .filter(agent=run.agent, tool=gate["tool"])
        .filter(Q(scope=Grant.Scope.RUN, run=run) | Q(scope=Grant.Scope.AGENT))
        # This run's own grants first, then the oldest.
        .order_by("-scope", "id")
    )
    for candidate in candidates:
        if not matches(candidate.envelope, item["args"]):
            continue
        # Compare-and-set with the row's own conditions again: a concurrent use of the last
        # allowance (or a revocation) makes this update match no row, because Postgres
        # re-checks the WHERE on the row version it waited for. Only the row's own columns:
        # with a join Django writes `WHERE id IN (subquery)`, and the re-check would see the
        # subquery's stale answer (two workers both took the last use that way).
        if Grant.objects.filter(_unspent(now), pk=candidate.pk).update(uses=F("uses") + 1):
            candidate.uses += 1
            return candidate
    return None


def revoke(grant_id: int, *, user) -> Grant:
    """End the grant now; from this moment no call is let through by it. Any approver or
    admin may revoke (taking permission away is always safe). GrantRefused if it had already
    ended by revocation."""
    if not permissions.can_decide(user):
        raise GrantRefused(permissions.ONLY_APPROVERS, status=403)
    found = visible_to(user).filter(pk=grant_id).first()
    if found is None:  # another team's grant is not there for this user
        raise Grant.DoesNotExist(f"no grant {grant_id}")
    now = timezone.now()
    if not Grant.objects.filter(pk=grant_id, revoked_at__isnull=True).update(
        revoked_at=now, revoked_by_name=user.get_username()
    ):
        found.refresh_from_db()
        raise GrantRefused(
            f"grant #{grant_id} was already revoked by {found.revoked_by_name} at "
            f"{found.revoked_at:%Y-%m-%d %H:%M:%S} UTC",
            status=409,
        )
    found.refresh_from_db()
    return found


def envelope_for(arg: str, bound: Any) -> list[dict]:
    """One upper bound as an envelope (the card's "while <arg> <= X")."""
    number = declared_policy._number(bound)
    if number is None:
        return [{"arg": arg, "op": "lte", "value": bound}]
    return [{"arg": arg, "op": "lte", "value": declared_policy._fmt(number)}]


def numeric_args(approval: Approval) -> list[tuple[str, str]]:
    """The call's numeric arguments and their values as text (what an envelope can bound):
    numbers, and strings the tool's schema takes as numbers (decimals travel as "12.50")."""
    found = []
    for name, value in (approval.args or {}).items():
        if isinstance(value, bool):
            continue
        number = declared_policy._number(value) if isinstance(value, int | float | str) else None
        if number is None:
            continue
        if not isinstance(value, str) or "number" in _schema_types(approval, name):
            found.append((name, declared_policy._fmt(number)))
    return found


def _schema_types(approval: Approval, name: str) -> set:
    spec = grant_rules.properties(approval.tool_object()).get(name) or {}
    return {spec.get("type")} | {s.get("type") for s in spec.get("anyOf", [])}
