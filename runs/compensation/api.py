"""The API of compensation (runs/compensation/models.py): a run's committed effects beside their
compensations, and asking for them. Reading needs any role; asking the operator role and a
team that may operate the run, checked before the body is parsed. Refusals are 409 (the run
is not failed or cancelled, the effect declares no compensation, it is asked or made
already), 404 (no such effect) or 422 (its compensation's arguments cannot be made), with
nothing changed."""

from datetime import datetime
from typing import Any
from uuid import UUID

from ninja import Field, Router, Schema, Status
from ninja.errors import HttpError
from pydantic import ConfigDict

from accounts.requests import ApiRequest

from ..api import OPERATORS, Message, _get_run
from ..models import Compensation, Run
from . import effects as compensable
from . import models as compensation

router = Router(tags=["compensation"])


class CompensationOut(Schema):
    id: int
    status: str = Field(description="pending, compensated or failed")
    tool: str
    args: dict[str, Any]
    attempt: int
    requested_by: str | None
    automatic: bool = Field(description="Asked by the agent's compensate_on_failure.")
    compensating_run: UUID | None
    detail: str
    result: Any = None
    created_at: datetime
    settled_at: datetime | None


class EffectOut(Schema):
    id: int
    tool: str
    args: dict[str, Any]
    result: Any = None
    described: str
    committed_at: datetime
    compensate_tool: str | None = Field(description="Its declared compensation; null: none.")
    state: str = Field(
        description="not compensable, not compensated, pending, compensated or failed"
    )
    requestable: bool
    compensations: list[CompensationOut]


class CompensationsOut(Schema):
    run: UUID
    status: str
    offered: bool = Field(description="Whether compensation may be asked for this run now.")
    why_not: str
    effects: list[EffectOut]


class CompensateIn(Schema):
    model_config = ConfigDict(extra="forbid")

    effects: list[int] | None = Field(
        None,
        max_length=100,
        description="The effects to compensate (ids); null: every one that may be, newest first.",
    )


def _compensation_out(comp: Compensation) -> dict:
    return {
        **{n: getattr(comp, n) for n in ("id", "status", "tool", "args", "attempt", "detail")},
        "requested_by": comp.requested_by.get_username() if comp.requested_by else None,
        "automatic": comp.automatic,
        "compensating_run": comp.compensating_run_id,
        "result": comp.result,
        "created_at": comp.created_at,
        "settled_at": comp.settled_at,
    }


def _state(run: Run) -> dict:
    run.refresh_from_db()
    why_not = compensable.why_not_offered(run)
    return {
        "run": run.pk,
        "status": run.status,
        "offered": not why_not,
        "why_not": why_not,
        "effects": [
            {
                "id": e.effect.pk,
                "tool": e.effect.tool,
                "args": e.effect.args,
                "result": (e.effect.result or {}).get("result"),
                "described": e.described,
                "committed_at": e.effect.updated_at,
                "compensate_tool": e.compensate_tool or None,
                "state": e.state,
                "requestable": e.requestable and not why_not,
                "compensations": [_compensation_out(c) for c in e.compensations],
            }
            for e in compensable.effects(run)
        ],
    }


@router.get(
    "/runs/{run_id}/compensations",
    response=CompensationsOut,
    summary="A run's committed effects beside their compensations",
)
def get_compensations(request: ApiRequest, run_id: UUID) -> dict:
    return _state(_get_run(request, run_id))


@router.post(
    "/runs/{run_id}/compensations",
    response={201: CompensationsOut, 403: Message, 404: Message, 409: Message, 422: Message},
    auth=OPERATORS,
    summary="Compensate committed effects of a failed or cancelled run (gated like any call)",
)
def post_compensations(
    request: ApiRequest, run_id: UUID, payload: CompensateIn | None = None
) -> Status:
    run = _get_run(request, run_id)
    if not Run.objects.operable_by(request.auth).filter(pk=run.pk).exists():
        raise HttpError(403, f"your teams may not operate runs of {run.agent}")
    effect_ids = payload.effects if payload is not None else None
    try:
        compensation.request(run, effect_ids, by=request.auth)
    except compensation.CompensationError as exc:
        raise HttpError(exc.status, exc.message) from exc
    return Status(201, _state(run))
