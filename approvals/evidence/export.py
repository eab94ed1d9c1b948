"""Decisions as compliance evidence: the records of a period, read from the database in chunks
and written as a signed, hash-chained file (approvals/evidence/chain.py has the format and its
verification).
Why and how: docs/design/modules.md."""

from collections import defaultdict
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.utils import timezone

from accounts.models import Team
from agentkit import signing
from agentkit.database import in_batches
from runs.models import Step

from ..models import Approval, ApprovalVote, DecisionLink, Escalation, RuleHit
from . import chain as evidence_chain
from .chain import FORMATS, Header, signed_lines

CHUNK = 500
SETTLED = (
    Approval.Status.APPROVED,
    Approval.Status.REJECTED,
    Approval.Status.ANSWERED,
    Approval.Status.EXPIRED,
)
CONTENT_TYPES = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson"}


class ExportError(ValueError):
    """A request for an export that cannot be made (bad period, format, agent): its message
    says why, for a 400 or a command error."""


def signing_key() -> bytes:
    """AGENTOPS_EVIDENCE_KEY when set, else a key derived from SECRET_KEY."""
    dedicated = settings.AGENTOPS.get("EVIDENCE_KEY") or ""
    if dedicated:
        return dedicated.encode()
    return signing.derive_key(settings.SECRET_KEY, evidence_chain.KEY_SALT)


def parse_moment(value: str, name: str, *, end: bool = False) -> datetime:
    """An ISO date or date-time (naive ones are UTC); a bare date as `until` means the end of
    that day. ExportError with the field's name otherwise."""
    value = (value or "").strip()
    if not value:
        raise ExportError(f"{name} is required (an ISO date such as 2026-01-31)")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ExportError(
            f"{name} {value!r} is not an ISO date or date-time (2026-01-31 or "
            "2026-01-31T12:00:00+00:00)"
        ) from None
    if end and len(value) == 10:  # a bare date: the whole day is in the period
        moment += timedelta(days=1)
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment, UTC)
    return moment


def checked_request(
    since: str, until: str, fmt: str, agent: str = ""
) -> tuple[datetime, datetime, str, str]:
    """The period, format and agent of an export request, or ExportError saying what is
    wrong."""
    agent = (agent or "").strip()
    if agent:
        try:
            validate_slug(agent)
        except ValidationError:
            raise ExportError(f"agent {agent[:64]!r} is not an agent's slug") from None
    fmt = (fmt or "").strip().lower()
    if fmt not in FORMATS:
        raise ExportError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    start = parse_moment(since, "since")
    end = parse_moment(until, "until", end=True)
    if end <= start:
        raise ExportError("until must be after since")
    return start, end, fmt, agent


def export_lines(
    *,
    since: datetime,
    until: datetime,
    fmt: str,
    agent: str = "",
    agents: Iterable[str] | None = None,
    team: str = "",
) -> Iterator[str]:
    """The signed export of the period, line by line; `agents` (None: all) limits it, `team`
    is the team that limit came from, named in the header."""
    agents = tuple(sorted(agents)) if agents is not None else None
    return signed_lines(
        records(since=since, until=until, agent=agent, agents=agents),
        fmt=fmt,
        header=Header(
            since=since,
            until=until,
            agent=agent,
            created_at=timezone.now(),
            team=team,
            agents=agents,
        ),
        key=signing_key(),
    )


def filename(since: datetime, until: datetime, fmt: str, agent: str = "", team: str = "") -> str:
    who = "".join(f"-{part}" for part in (team, agent) if part)
    return f"decisions{who}-{since:%Y%m%dT%H%M%S}-{until:%Y%m%dT%H%M%S}.{fmt}"


# --- the records -----------------------------------------------------------------------------
def records(
    *, since: datetime, until: datetime, agent: str = "", agents: Iterable[str] | None = None
) -> Iterator[dict]:
    """Every decision record of approvals settled in [since, until), oldest first.

    Reads the approvals in keyset batches and the rest (votes, rule uses, escalations,
    decision steps) per chunk, so memory stays flat whatever the period's size."""
    approvals = (
        Approval.objects.filter(status__in=SETTLED, decided_at__gte=since, decided_at__lt=until)
        .select_related("run", "decided_by", "grant")
        .order_by("decided_at", "id")
    )
    if agent:
        approvals = approvals.filter(run__agent=agent)
    if agents is not None:
        approvals = approvals.filter(run__agent__in=list(agents))
    chunk: list[Approval] = []
    for approval in in_batches(approvals, by=("decided_at", "id"), size=CHUNK):
        chunk.append(approval)
        if len(chunk) == CHUNK:
            yield from _chunk_records(chunk)
            chunk = []
    if chunk:
        yield from _chunk_records(chunk)


def _chunk_records(chunk: list[Approval]) -> Iterator[dict]:
    ids = [a.pk for a in chunk]
    votes = defaultdict(list)
    for vote in ApprovalVote.objects.filter(approval__in=ids).order_by("decided_at", "id"):
        votes[vote.approval_id].append(vote)
    rule_uses = {
        hit.approval_id: hit
        for hit in RuleHit.objects.filter(approval__in=ids, checked=False).select_related(
            "rule", "rule__accepted_by"
        )
    }
    tiers: dict = defaultdict(dict)
    for escalation in Escalation.objects.filter(approval__in=ids).order_by("tier"):
        for name in escalation.notified or []:
            tiers[escalation.approval_id].setdefault(name, escalation.tier)
    steps = _steps_of(chunk)
    # Decisions recorded before steps named their channel: a spent one-tap link says it.
    tapped = set(
        DecisionLink.objects.filter(approval__in=ids, used_at__isnull=False).values_list(
            "approval", "user"
        )
    )
    for approval in chunk:
        yield from _approval_records(
            approval,
            votes=votes.get(approval.pk, []),
            rule_use=rule_uses.get(approval.pk),
            tiers=tiers.get(approval.pk, {}),
            steps=steps.get(str(approval.pk), []),
            tapped=tapped,
        )


def _steps_of(chunk: list[Approval]) -> dict[str, list[Step]]:
    """The gate and decision steps of the chunk's approvals, by approval id."""
    found = defaultdict(list)
    wanted = {str(a.pk) for a in chunk}
    steps = Step.objects.filter(
        run__in={a.run_id for a in chunk},
        kind__in=(Step.Kind.GATE, Step.Kind.DECISION),
        data__approval__in=list(wanted),
    ).order_by("run", "seq")
    for step in steps:
        found[step.data.get("approval")].append(step)
    return found


def _approval_records(
    approval: Approval, *, votes, rule_use, tiers, steps, tapped
) -> Iterator[dict]:
    base = _base(approval)
    if approval.grant_id is not None:
        # No person decided this call: the approver who gave the standing grant did, ahead.
        grant = approval.grant
        gate = next((s for s in steps if s.kind == Step.Kind.GATE), None)
        yield {
            **base,
            "decided_at": _iso(approval.decided_at),
            "decision": "grant_approve",
            "decided_by": grant.granted_by_name,
            "authority": f"standing grant #{grant.pk} (by {grant.granted_by_name})",
            "reason": approval.reason,
            "via": "grant",
            **_step_ref(gate),
        }
        return
    if rule_use is not None:
        rule = rule_use.rule
        gate = next((s for s in steps if s.kind == Step.Kind.GATE), None)
        yield {
            **base,
            "decided_at": _iso(approval.decided_at),
            "decision": "rule_approve",
            "decided_by": "",
            "authority": "auto-approve rule",
            "rule": rule.pk,
            "rule_accepted_by": rule.accepted_by.get_username() if rule.accepted_by else "",
            "reason": approval.reason,
            "via": "rule",
            **_step_ref(gate),
        }
        return
    decisions = [s for s in steps if s.kind == Step.Kind.DECISION]
    named = set((approval.run.agent_config.get("gates") or {}).get("approvers") or [])
    for vote in votes:
        step = next((s for s in decisions if s.data.get("by") == vote.username), None)
        data = step.data if step is not None else {}
        acting_for = data.get("acting_for") or ""
        yield {
            **base,
            "decided_at": _iso(vote.decided_at),
            "decision": "edit" if vote.edited else vote.decision,
            "decided_by": vote.username,
            "acting_for": acting_for,
            "authority": _authority(vote.username, acting_for, named, tiers),
            "escalation_tier": tiers.get(vote.username),
            "votes": data.get("votes", ""),
            "via": data.get("via") or ("one_tap" if (approval.pk, vote.user_id) in tapped else ""),
            "edited": vote.edited,
            "reason": vote.reason,
            "answer": vote.answer,
            "opened_at": _iso(vote.opened_at),
            "seconds_open": vote.seconds_open,
            **_step_ref(step),
        }
    if approval.status == Approval.Status.EXPIRED:
        # After the votes of a quorum that never reached its count, if any.
        expiry = next((s for s in decisions if s.data.get("decision") == "expire"), None)
        yield {
            **base,
            "decided_at": _iso(approval.decided_at),
            "decision": "expire",
            "decided_by": "",
            "authority": "deadline",
            "reason": f"no decision by {_iso(approval.expires_at)}; on expiry: "
            f"{approval.on_expiry}",
            "via": "system",
            **_step_ref(expiry),
        }
    elif not votes:
        # Settled without a vote row (none is expected): the approval's own record, so the
        # export never leaves a settled approval out.
        step = decisions[-1] if decisions else None
        who = approval.decided_by.get_username() if approval.decided_by else ""
        yield {
            **base,
            "decided_at": _iso(approval.decided_at),
            "decision": approval.status,
            "decided_by": who,
            "authority": "",
            "reason": approval.reason,
            "answer": approval.answer,
            "via": (step.data.get("via") if step else "") or "",
            **_step_ref(step),
        }


def _base(approval: Approval) -> dict:
    pending = approval.decided_at - approval.requested_at if approval.decided_at else None
    return {
        "approval": str(approval.pk),
        "run": str(approval.run_id),
        "agent": approval.run.agent,
        "kind": approval.kind,
        "tool": approval.tool,
        "args_hash": approval.args_hash,
        "approved_args_hash": approval.approved_args_hash,
        "risk": approval.risk,
        "gated_because": approval.explanation,
        "requested_at": _iso(approval.requested_at),
        "seconds_pending": round(pending.total_seconds(), 3) if pending is not None else None,
        "outcome": approval.status,
        "acting_for": "",
        "escalation_tier": None,
        "rule": None,
        "rule_accepted_by": "",
        "votes": "",
        "edited": False,
        "answer": "",
        "opened_at": None,
        "seconds_open": None,
    }


def _authority(username: str, acting_for: str, named: set[str], tiers: dict) -> str:
    """Under which grant the person decided (permissions.py's rules, as they applied)."""
    if acting_for:
        return f"delegation from {acting_for}"
    if named and username not in named and username in tiers:
        return f"escalation tier {tiers[username]}"
    if username in named:
        return "named approver"
    return "approver role"


def _step_ref(step: Step | None) -> dict:
    return {"step_seq": step.seq if step else None, "step_hash": step.hash if step else ""}


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


# --- scheduled exports -------------------------------------------------------------------------
def previous_period(now: datetime, period: str) -> tuple[datetime, datetime]:
    """The last whole day, ISO week or month before `now` (UTC)."""
    now = now.astimezone(UTC)
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "week":
        end = today - timedelta(days=today.weekday())
        return end - timedelta(days=7), end
    if period == "month":
        end = today.replace(day=1)
        return (end - timedelta(days=1)).replace(day=1), end
    return today - timedelta(days=1), today


def write_scheduled(now: datetime | None = None) -> list[Path]:
    """The previous period's export written to AGENTOPS_DECISIONS_EXPORT_DIR, and each team's
    (its agents' decisions, its name in the header) to a folder of its own, <dir>/<team slug>/:
    what a team's own auditors may be given without the rest. Every file atomically (a
    reader never sees half of one). Empty when no directory is configured; the installation's
    file first."""
    config = settings.AGENTOPS
    directory = config.get("DECISIONS_EXPORT_DIR") or ""
    if not directory:
        return []
    fmt = config.get("DECISIONS_EXPORT_FORMAT") or "jsonl"
    since, until = previous_period(now or timezone.now(), config.get("DECISIONS_EXPORT_PERIOD"))
    target = Path(directory)
    written = [_write(target / filename(since, until, fmt), since, until, fmt)]
    for team in Team.objects.prefetch_related("agents"):
        agents = [owned.agent for owned in team.agents.all()]
        path = target / team.slug / filename(since, until, fmt, team=team.slug)
        written.append(_write(path, since, until, fmt, agents=agents, team=team.slug))
    return written


def _write(path: Path, since: datetime, until: datetime, fmt: str, **which) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with partial.open("w", encoding="utf-8", newline="") as out:
        out.writelines(export_lines(since=since, until=until, fmt=fmt, **which))
    partial.replace(path)
    return path
