"""The runs API: the agent catalogue, launch, list, detail, timeline, checkpoints, cancel,
spend per agent.

The user is `request.auth` (accounts/auth.py). Reading needs any role, launching and
cancelling the operator role; both are checked before the body is parsed. Bad input is
refused before anything is written: a 4xx with a message, never a half-created run.
"""

from collections.abc import Callable
from functools import wraps
from typing import Any
from uuid import UUID

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db.models import Q, QuerySet
from django.db.models.fields.json import KT
from django.http import HttpRequest, HttpResponse, JsonResponse
from ninja import Field, Query, Router, Schema, Status
from ninja.decorators import decorate_view
from ninja.errors import HttpError, ValidationError
from ninja.pagination import LimitOffsetPagination, paginate

from accounts import teams
from accounts.auth import api_auth
from accounts.requests import ApiRequest
from agentkit.agents import CATALOGUE, Agent, get_agent, json_type_errors

from . import api_paging, costs, engine, paging
from .budgets import models as budgets
from .models import Checkpoint, Run, canonical_json
from .schemas import (
    AgentOut,
    CancelIn,
    CheckpointOut,
    CostsOut,
    LaunchIn,
    RunDetailOut,
    RunFilters,
    RunOut,
    StepPage,
    with_pending_count,
)

# Roles are checked by the authenticators, before a body is parsed: every endpoint here needs
# a role that can read; launching and cancelling need the operator role.
READERS = api_auth("can_view")
OPERATORS = api_auth("can_operate")
router = Router(tags=["runs"], auth=READERS)

MAX_PAGE = 200  # runs or checkpoints per page
MAX_STEPS_PAGE = 500
# A launch body is the input plus a few small fields; anything much larger is refused
# before it is parsed.
BODY_SLACK_BYTES = 8_192


class Message(Schema):
    detail: str


class FieldErrors(Schema):
    detail: list[dict[str, Any]]


def _max_input_bytes() -> int:
    return int(settings.AGENTOPS["MAX_INPUT_BYTES"])


def refuse_large_bodies(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """413 before the body is parsed or even authenticated: size is cheap to check."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        limit = _max_input_bytes() + BODY_SLACK_BYTES
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return JsonResponse({"detail": "invalid Content-Length"}, status=400)
        try:
            # The declared length first (nothing read yet), then what actually came: a
            # chunked request declares nothing.
            too_big = declared > limit or len(request.body) > limit
        except RequestDataTooBig:
            too_big = True
        if too_big:
            return JsonResponse({"detail": f"request body larger than {limit} bytes"}, status=413)
        return view(request, *args, **kwargs)

    return wrapper


# Lists by OFFSET read and throw away every row before the page: deeper than this, a client
# pages with `cursor` (422 beyond it). Counts stop at api_paging.COUNT_CAP as the HTML lists' do.
MAX_LIST_OFFSET = 10_000


class KeysetPagination(LimitOffsetPagination):
    """`limit` with either `offset` (up to MAX_LIST_OFFSET) or `cursor`: a page's
    `next_cursor` (runs/api_paging.py), whose page reads only its own rows whatever its depth
    and never shifts when rows arrive. A list says how to read a cursor (`after`: the rows
    after it, in the list's order) and what a row's position is."""

    class Input(Schema):
        limit: int = Field(100, ge=1, description=f"At most {MAX_PAGE}.")
        offset: int = Field(0, ge=0, le=MAX_LIST_OFFSET)
        cursor: str | None = Field(
            None, max_length=api_paging.CURSOR_MAX_LENGTH, description=api_paging.CURSOR_HELP
        )

    class Output(Schema):
        items: list[Any]
        count: int
        count_capped: bool
        next_cursor: str | None

    def after(self, cursor: str) -> Q:
        raise NotImplementedError

    def position(self, row: Any) -> str:
        raise NotImplementedError

    def paginate_queryset(
        self, queryset: QuerySet, pagination: Any, request: HttpRequest, **params: Any
    ) -> dict[str, Any]:
        limit = min(pagination.limit, self.max_limit)
        if pagination.cursor is not None:
            rows = list(queryset.filter(self.after(pagination.cursor))[: limit + 1])
        else:
            rows = list(queryset[pagination.offset : pagination.offset + limit + 1])
        more = len(rows) > limit
        return {
            "items": rows[:limit],
            **api_paging.capped_count(queryset),
            "next_cursor": api_paging.encode(self.position(rows[limit - 1])) if more else None,
        }


class RunsPagination(KeysetPagination):
    """Newest first, by (created_at, id): runs/paging.py's Cursor."""

    def after(self, cursor: str) -> Q:
        parsed = paging.Cursor.parse(api_paging.decode(cursor))
        if parsed is None:
            raise api_paging.bad_cursor()
        return parsed.older()

    def position(self, row: Run) -> str:
        return paging.Cursor.of(row).token


class CheckpointsPagination(KeysetPagination):
    """By seq."""

    def after(self, cursor: str) -> Q:
        return Q(seq__gt=api_paging.seq_of(cursor))

    def position(self, row: Checkpoint) -> str:
        return str(row.seq)


# --- access ----------------------------------------------------------------------------------
def _runs() -> QuerySet[Run]:
    return Run.objects.select_related("launched_by")


def _get_run(request: ApiRequest, run_id: UUID) -> Run:
    """The one place a run is fetched for a user: which runs they may see lives here."""
    run = _runs().visible_to(request.auth).filter(pk=run_id).first()
    if run is None:
        raise HttpError(404, f"run {run_id} not found")
    return run


# --- catalogue -------------------------------------------------------------------------------
@router.get("/agents", response=list[AgentOut], summary="The agent catalogue")
def list_agents(request: ApiRequest) -> list[dict]:
    """The agents the caller's teams reach (accounts/teams.py)."""
    agents = teams.scope(request.auth, teams.Power.VIEW)
    return [
        _agent_out(agent)
        for agent in sorted(CATALOGUE.values(), key=lambda a: a.slug)
        if agents.allows(agent.slug)
    ]


def _agent_out(agent: Agent) -> dict:
    return {
        "slug": agent.slug,
        "title": agent.title,
        "description": agent.description,
        "model": agent.model,
        "tools": [tool.metadata() for tool in agent.tool_objects()],
        "input_schema": agent.input_schema(),
        "limits": agent.limits.as_dict(),
        "max_limits": agent.max_limits.as_dict(),
    }


# --- launch ----------------------------------------------------------------------------------
@router.post(
    "/runs",
    response={201: RunDetailOut, 403: Message, 409: Message, 413: Message, 422: FieldErrors},
    auth=OPERATORS,
    summary="Launch a run",
    description="409: the agent's budget is past its stop threshold (runs/budgets/models.py).",
)
@decorate_view(refuse_large_bodies)
def launch_run(request: ApiRequest, payload: LaunchIn) -> Status:
    user = request.auth
    agent = get_agent(payload.agent)
    if agent is None:
        known = ", ".join(sorted(CATALOGUE))
        raise _field_errors(
            {"agent": [f"unknown agent {payload.agent!r}; known agents: {known}"]}, at=()
        )
    if not teams.may(user, teams.Power.LAUNCH, agent.slug):
        raise HttpError(403, f"your teams may not launch {agent.slug}")
    size = len(canonical_json(payload.input).encode())
    if size > _max_input_bytes():
        raise HttpError(413, f"input is {size} bytes; the limit is {_max_input_bytes()}")

    errors = json_type_errors(agent.input_schema(), payload.input)
    cleaned = None
    if not errors:
        cleaned, errors = agent.validate_input(payload.input)
    if errors:
        raise _field_errors(errors, at=("input",))
    overrides = payload.limits.model_dump(exclude_none=True) if payload.limits else None
    limits, errors = agent.resolve_limits(overrides)
    if errors:
        raise _field_errors(errors, at=("limits",))

    refusal = budgets.launch_refusal(agent.slug)
    if refusal:
        raise HttpError(409, refusal)
    token = getattr(user, "api_token_name", None)
    run = engine.launch(
        agent=agent,
        input=cleaned,
        limits=limits,
        trigger=Run.Trigger.API,
        launched_by=user,
        source=f"token {token}" if token else "session",
    )
    run.refresh_from_db()  # answer with what GET /api/runs/{id} will say (stored decimals)
    run.pending_approvals = 0  # just launched: nothing can be waiting yet
    return Status(201, run)


def _field_errors(errors: dict[str, list[str]], *, at: tuple[str, ...]) -> ValidationError:
    """Field errors in the shape ninja gives its own validation errors."""
    base = ["body", "payload", *at]
    return ValidationError(
        [
            {
                "type": "value_error",
                "loc": base if field == "__all__" else [*base, field],
                "msg": message,
            }
            for field, messages in errors.items()
            for message in messages
        ]
    )


# --- reading ---------------------------------------------------------------------------------
@router.get("/runs", response=list[RunOut], summary="Runs, newest first")
@paginate(RunsPagination, max_limit=MAX_PAGE)
def list_runs(request: ApiRequest, filters: Query[RunFilters]) -> QuerySet[Run]:
    runs = (
        _runs()
        .visible_to(request.auth)
        # The list is a summary: the payloads stay in the database, the title comes from the
        # launch snapshot without loading the whole snapshot.
        .defer("input", "output", "agent_config")
        .annotate(snapshot_title=KT("agent_config__title"))
    )
    return filters.filter(runs).order_by("-created_at", "-pk")


@router.get("/runs/{run_id}", response=RunDetailOut, summary="One run")
def get_run(request: ApiRequest, run_id: UUID) -> Run:
    return with_pending_count(_get_run(request, run_id))


@router.get("/runs/{run_id}/steps", response=StepPage, summary="The run's timeline")
def list_steps(
    request: ApiRequest,
    run_id: UUID,
    after: int = Query(0, ge=0, description="Only steps with a greater seq."),
    limit: int = Query(100, ge=1, description=f"At most {MAX_STEPS_PAGE}."),
    cursor: str | None = Query(
        None, max_length=api_paging.CURSOR_MAX_LENGTH, description=api_paging.CURSOR_HELP
    ),
) -> dict:
    if cursor is not None:
        if after:
            raise api_paging.bad_cursor("give `after` or `cursor`, not both")
        after = api_paging.seq_of(cursor)
    run = _get_run(request, run_id)
    limit = min(limit, MAX_STEPS_PAGE)
    # One row more than asked tells whether another page follows without a COUNT: the run's
    # last_seq is the timeline's length.
    steps = list(run.steps.filter(seq__gt=after).order_by("seq")[: limit + 1])
    more = len(steps) > limit
    return {
        "items": steps[:limit],
        "has_more": more,
        "next_cursor": api_paging.encode(str(steps[limit - 1].seq)) if more else None,
        "last_seq": run.last_seq,
    }


@router.get("/runs/{run_id}/checkpoints", response=list[CheckpointOut], summary="Saved run states")
@paginate(CheckpointsPagination, max_limit=MAX_PAGE)
def list_checkpoints(request: ApiRequest, run_id: UUID) -> QuerySet[Checkpoint]:
    run = _get_run(request, run_id)
    return Checkpoint.objects.filter(run=run).only("seq", "created_at").order_by("seq")


# --- acting ----------------------------------------------------------------------------------
@router.post(
    "/runs/{run_id}/cancel",
    response={200: RunDetailOut, 403: Message, 404: Message, 409: Message},
    auth=OPERATORS,
    summary="Cancel a queued, running or waiting run",
)
def cancel_run(request: ApiRequest, run_id: UUID, payload: CancelIn | None = None) -> Run:
    run = _get_run(request, run_id)
    if not Run.objects.operable_by(request.auth).filter(pk=run.pk).exists():
        raise HttpError(403, f"your teams may not cancel runs of {run.agent}")
    if not run.cancel(by=request.auth, reason=payload.reason if payload else ""):
        run.refresh_from_db()
        raise HttpError(
            409, f"run already finished: {run.status} ({run.get_termination_reason_display()})"
        )
    return with_pending_count(run)


# --- spend -----------------------------------------------------------------------------------
@router.get("/costs", response=CostsOut, summary="Model calls, tokens and cost per agent and day")
def get_costs(
    request: ApiRequest,
    days: int = Query(
        costs.DEFAULT_DAYS,
        ge=1,
        le=costs.MAX_DAYS,
        description=f"UTC days, today included (at most {costs.MAX_DAYS}).",
    ),
    agent: str | None = Query(None, max_length=64, description="One agent's slug."),
) -> dict:
    """Summed from the recorded steps (the timeline is the source of truth): the agents'
    model turns, context summaries, model verifiers' checks and paid tool calls, so an agent's
    cost here is the sum of its runs' cost. An answer discarded because its run was cancelled
    meanwhile is charged to the run only, not here. Only the agents the caller may see."""
    report = costs.cost_by_agent(days=days, agent=agent, viewer=request.auth)
    return {
        "since": report.since,
        "days": days,
        "rows": [
            {"agent": a.agent, "day": day, **_spend(spend)}
            for a in report.agents
            for day, spend in a.by_day.items()
        ],
        "agents": [{"agent": a.agent, **_spend(a.total)} for a in report.agents],
        "total": _spend(report.total),
    }


def _spend(spend: costs.Spend) -> dict:
    return {
        "model_calls": spend.calls,
        "tokens_in": spend.tokens_in,
        "tokens_out": spend.tokens_out,
        "cost_usd": spend.cost_usd,
        "cache_read_tokens": spend.cache_read_tokens,
        "cache_write_tokens": spend.cache_write_tokens,
        "cache_saved_usd": spend.cache_saved_usd,
        "tool_cost_usd": spend.tool_cost_usd,
    }
