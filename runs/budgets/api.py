"""Budgets in the JSON API: everyone who may see runs reads those they see with their current
spend; admins add, replace and remove any, a team's administrators their team's (the Budgets
page's rules: runs/budgets/forms.py, runs/budgets/models.py `may_edit`)."""

from datetime import datetime
from decimal import Decimal
from typing import Literal

from django.http import Http404
from django.shortcuts import get_object_or_404
from django.utils import timezone
from ninja import Field, Router, Schema, Status
from ninja.errors import HttpError, ValidationError
from pydantic import ConfigDict

from accounts.auth import api_auth
from accounts.requests import ApiRequest

from ..api import FieldErrors, Message
from ..models import Budget
from . import models as budgets
from .forms import budget_errors

READERS = api_auth("can_view")
router = Router(tags=["budgets"], auth=READERS)


class BudgetIn(Schema):
    model_config = ConfigDict(extra="forbid")

    agent: str = Field("", max_length=64, description="The agent's slug (an agent's budget).")
    team: str | None = Field(
        None, max_length=50, description="The team's slug (a team's budget: its agents summed)."
    )
    period: Literal["day", "week", "month"] = "month"
    time_zone: str = Field("UTC", max_length=64, description="IANA name: the period's calendar.")
    amount_usd: Decimal = Field(description="Model calls and tools, per period.")
    warn_percent: int = Field(80, description="Approvers are told past this.")
    approve_percent: int = Field(100, description="Runs go on or start only when approved.")
    stop_percent: int = Field(120, description="Runs stop; new ones are refused (409).")


class BudgetOut(Schema):
    id: int
    agent: str = Field(description='"" for a team\'s budget.')
    team: str | None = Field(description="The team's slug, for a team's budget.")
    agents: list[str] = Field(description="Whose spend it sums.")
    period: str
    time_zone: str
    amount_usd: Decimal
    warn_percent: int
    approve_percent: int
    stop_percent: int
    period_start: datetime = Field(description="The current period's first instant (UTC).")
    period_end: datetime
    spent_usd: Decimal = Field(description="Spent in the current period so far.")
    percent: Decimal
    level: Literal["ok", "warn", "approve", "stop"]
    updated_at: datetime


def _out(state: budgets.BudgetState) -> dict:
    b = state.budget
    return {
        **{f: getattr(b, f) for f in BudgetIn.model_fields if f != "team"},
        "team": b.team.slug if b.team_id else None,
        "agents": list(state.agents),
        "id": b.pk,
        "period_start": state.start,
        "period_end": state.end,
        "spent_usd": state.spent_usd,
        "percent": state.percent,
        "level": state.level,
        "updated_at": b.updated_at,
    }


def _saved(request: ApiRequest, payload: BudgetIn, instance: Budget | None) -> Budget:
    if not (request.auth.is_admin or budgets.administered_teams(request.auth)):
        raise HttpError(403, "only admins and a team's administrators set budgets")
    budget, errors = budget_errors(payload.model_dump(), instance, user=request.auth)
    if errors:
        raise ValidationError(
            [
                {"type": "value_error", "loc": ["body", "payload", field], "msg": message}
                for field, messages in errors.items()
                for message in messages
            ]
        )
    budget.updated_by = request.auth
    budget.updated_at = timezone.now()
    budget.save()
    return budget


def _editable(request: ApiRequest, budget_id: int) -> Budget:
    budget = get_object_or_404(budgets.with_teams(Budget.objects), pk=budget_id)
    if budgets.may_edit(request.auth, budget):
        return budget
    if not budgets.visible_to(request.auth).filter(pk=budget.pk).exists():
        raise Http404("no such budget")
    raise HttpError(403, "only admins and the team's administrators change this budget")


@router.get("/budgets", response=list[BudgetOut], summary="Budgets with their current spend")
def list_budgets(request: ApiRequest) -> list[dict]:
    return [_out(s) for s in budgets.states(viewer=request.auth)]


@router.get("/budgets/{budget_id}", response={200: BudgetOut, 404: Message}, summary="One budget")
def get_budget(request: ApiRequest, budget_id: int) -> dict:
    # Another team's is a 404, as unseen runs are.
    seen = budgets.with_teams(budgets.visible_to(request.auth))
    return _out(budgets.state_of(get_object_or_404(seen, pk=budget_id)))


@router.post(
    "/budgets",
    response={201: BudgetOut, 403: Message, 422: FieldErrors},
    summary="Add a budget (admins; a team's administrators for their team)",
)
def create_budget(request: ApiRequest, payload: BudgetIn) -> Status:
    return Status(201, _out(budgets.state_of(_saved(request, payload, None))))


@router.put(
    "/budgets/{budget_id}",
    response={200: BudgetOut, 403: Message, 404: Message, 422: FieldErrors},
    summary="Replace a budget (admins; a team's administrators for their team)",
)
def replace_budget(request: ApiRequest, budget_id: int, payload: BudgetIn) -> dict:
    budget = _editable(request, budget_id)
    return _out(budgets.state_of(_saved(request, payload, budget)))


@router.delete(
    "/budgets/{budget_id}",
    response={204: None, 403: Message, 404: Message},
    summary="Remove a budget (admins; a team's administrators for their team)",
)
def delete_budget(request: ApiRequest, budget_id: int) -> Status:
    _editable(request, budget_id).delete()
    return Status(204, None)
