"""Standing grants over the API (approvals/grants/models.py has the rules): grant from an approval,
list, revoke; and resume a run an expiry halted. Approvers and admins only; errors are JSON
`{"detail": ..., "errors": {...}}` with 403, 404, 409 or 422, never a 500."""

from datetime import datetime, timedelta
from typing import Literal
from uuid import UUID

from django.db.models import Q
from django.http import JsonResponse
from django.utils import timezone
from ninja import Field, Router, Schema

from accounts.auth import api_auth
from accounts.requests import ApiRequest
from runs import api_paging

from .. import decisions
from ..models import Approval, Grant
from . import models as grants

router = Router(tags=["grants"])
APPROVERS = api_auth("can_approve")
MAX_PAGE = 200


class Condition(Schema):
    arg: str = Field(max_length=64)
    op: Literal["lte", "eq"]
    value: str | int | float | bool | None


class GrantIn(Schema):
    """`scope` run: the rest of the approval's run; agent: the agent's calls, with
    `expires_in_seconds` and/or `max_uses`. `envelope`: conditions every call must meet."""

    scope: Literal["run", "agent"]
    envelope: list[Condition] = []
    # A bound the date cannot overflow (a 500 otherwise); the grant's rules then say that
    # more than grants.MAX_DURATION is too long.
    expires_in_seconds: int | None = Field(None, ge=1, le=10**9)
    max_uses: int | None = None
    note: str = Field("", max_length=500)
    # The `arguments_hash` of the call shown to the user: a grant from any other call is 409.
    shown_args_hash: str | None = None


def _error(status: int, detail: str, **extra) -> JsonResponse:
    return JsonResponse({"detail": detail, **extra}, status=status)


def _out(grant: Grant) -> dict:
    return {
        "id": grant.pk,
        "scope": grant.scope,
        "agent": grant.agent,
        "run": str(grant.run_id) if grant.run_id else None,
        "tool": grant.tool,
        "envelope": grant.envelope,
        "expires_at": _iso(grant.expires_at),
        "max_uses": grant.max_uses,
        "uses": grant.uses,
        "granted_by": grant.granted_by_name,
        "granted_at": _iso(grant.granted_at),
        "from_approval": str(grant.from_approval_id) if grant.from_approval_id else None,
        "note": grant.note,
        "revoked_at": _iso(grant.revoked_at),
        "revoked_by": grant.revoked_by_name or None,
        "active": grants.is_active(grant),
        "described": grants.describe(grant),
    }


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


@router.post("/approvals/{uuid:approval_id}/grant", auth=APPROVERS)
def post_grant(request: ApiRequest, approval_id: UUID, payload: GrantIn):
    """Approve the approval (if pending) and allow calls like it within the bounds given.
    201 with the grant; 422 for a call that cannot be granted (high risk, four-eyes, quorum,
    personal data) or bounds out of range; 403 for an approver who may not decide it."""
    expires_at = (
        timezone.now() + timedelta(seconds=payload.expires_in_seconds)
        if payload.expires_in_seconds
        else None
    )
    bounds = grants.Bounds(
        scope=payload.scope,
        envelope=[c.dict() for c in payload.envelope],
        expires_at=expires_at,
        max_uses=payload.max_uses,
        note=payload.note,
    )
    try:
        made, approval = grants.grant(
            approval_id,
            user=request.auth,
            bounds=bounds,
            shown_args_hash=payload.shown_args_hash,
            via="api",
        )
    except Approval.DoesNotExist:
        return _error(404, "no such approval")
    except grants.GrantRefused as exc:
        return _error(exc.status, exc.message, errors=exc.errors)
    except decisions.DecisionError as exc:
        return _error(exc.status, exc.message)
    return JsonResponse({**_out(made), "approval_status": approval.status}, status=201)


@router.get("/grants", auth=APPROVERS)
def list_grants(request: ApiRequest, active: bool = True, limit: int = 50, cursor: str = ""):
    """Active grants (`active=false`: every grant), newest first; `limit` 1 to 200; the page
    after another with `cursor` (its `next_cursor`). `count` stops at 10 000 (`count_capped`)."""
    errors: dict[str, list[str]] = {}
    if not 1 <= limit <= MAX_PAGE:
        errors["limit"] = [f"between 1 and {MAX_PAGE}"]
    after = _grant_position(cursor) if cursor else None
    if cursor and after is None:
        errors["cursor"] = ["not a page's cursor (give a page's next_cursor)"]
    if errors:
        return _error(422, "invalid filters", errors=errors)
    found = grants.visible_to(request.auth, grants.active() if active else None)
    ordered = found.order_by("-granted_at", "-id")
    if after is not None:
        granted_at, grant_id = after
        ordered = ordered.filter(
            Q(granted_at__lt=granted_at) | Q(granted_at=granted_at, id__lt=grant_id)
        )
    rows = list(ordered[: limit + 1])
    more = len(rows) > limit
    last = rows[limit - 1] if more else None
    return {
        "items": [_out(g) for g in rows[:limit]],
        **api_paging.capped_count(found),
        "next_cursor": (
            api_paging.encode(f"{last.granted_at.isoformat()}|{last.pk}") if last else None
        ),
    }


def _grant_position(cursor: str) -> tuple[datetime, int] | None:
    """(granted_at, id) from a cursor; None if it is not one this list gave."""
    if len(cursor) > api_paging.CURSOR_MAX_LENGTH:
        return None
    moment, _, grant_id = api_paging.decode(cursor).partition("|")
    try:
        granted_at = datetime.fromisoformat(moment)
    except ValueError:
        return None
    if granted_at.tzinfo is None or not grant_id.isdigit() or len(grant_id) > 18:
        return None
    return granted_at, int(grant_id)


@router.post("/grants/{int:grant_id}/revoke", auth=APPROVERS)
def revoke_grant(request: ApiRequest, grant_id: int):
    """Revoke now: no call is let through by it from this moment. 409 if already revoked."""
    try:
        return _out(grants.revoke(grant_id, user=request.auth))
    except Grant.DoesNotExist:
        return _error(404, "no such grant")
    except grants.GrantRefused as exc:
        return _error(exc.status, exc.message)


@router.post("/approvals/{uuid:approval_id}/resume-halted")
def resume_halted(request: ApiRequest, approval_id: UUID):
    """Resume the run this approval's expiry halted (operators and approvers): the agent is
    told the call was not executed and goes on. 409 when the run is not halted."""
    approval = Approval.objects.visible_to(request.auth).filter(pk=approval_id).first()
    if approval is None:
        return _error(404, "no such approval")
    try:
        run = decisions.resume_halted(approval.run_id, user=request.auth)
    except decisions.DecisionForbidden as exc:
        return _error(403, exc.message)
    except decisions.DecisionConflict as exc:
        return _error(409, exc.message)
    return {"run": str(run.pk), "status": run.status}
