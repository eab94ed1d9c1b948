"""The history API: fork a run from a checkpoint, replay a run, import an exported run.

Forking launches a run, so it needs the operator role; a replay writes nothing that stays,
but it runs the engine, so it needs the operator role too; importing stores a run from
elsewhere, which only an admin may do.
"""

from typing import Any
from uuid import UUID

from django.http import HttpRequest
from ninja import Field, Router, Schema, Status
from ninja.errors import HttpError
from pydantic import ConfigDict

from accounts.auth import api_auth
from accounts.requests import ApiRequest
from runs.models import Run
from runs.schemas import RunDetailOut, with_pending_count

from .fork import MAX_INSTRUCTION_CHARS, ForkError, fork
from .replay import replay
from .transfer import MAX_IMPORT_BYTES, ImportRefused, import_run

router = Router(tags=["history"])
OPERATORS = api_auth("can_operate")
ADMINS = api_auth("is_admin")


class Message(Schema):
    detail: str


class ForkIn(Schema):
    model_config = ConfigDict(extra="forbid")

    seq: int = Field(ge=1, description="The step after which the checkpoint was saved.")
    instruction: str = Field(
        "", max_length=MAX_INSTRUCTION_CHARS, description="Appended for the agent to read."
    )


class DivergenceOut(Schema):
    seq: int
    recorded: str
    replayed: str
    why: str


class ReplayOut(Schema):
    run_id: str
    agent: str
    identical: bool
    summary: str
    compared: int = Field(description="Steps that replayed the same before any divergence.")
    recorded_steps: int
    divergence: DivergenceOut | None
    notes: list[str]
    recorded: list[str] = Field(description="Each recorded step's signature, in seq order.")
    replayed: list[str]


def _run(request: ApiRequest, run_id: UUID) -> Run:
    run = Run.objects.visible_to(request.auth).filter(pk=run_id).first()
    if run is None:
        raise HttpError(404, f"run {run_id} not found")
    # Forking and replaying launch a run of the same agent: the teams' launch power.
    if not Run.objects.operable_by(request.auth).filter(pk=run.pk).exists():
        raise HttpError(403, f"your teams may not launch {run.agent}")
    return run


@router.post(
    "/runs/{run_id}/fork",
    response={201: RunDetailOut, 403: Message, 404: Message, 422: Message},
    auth=OPERATORS,
    summary="Start a new run from a checkpoint of this one",
)
def fork_run(request: ApiRequest, run_id: UUID, payload: ForkIn) -> Status:
    origin = _run(request, run_id)
    try:
        child = fork(origin, payload.seq, instruction=payload.instruction, by=request.auth)
    except ForkError as exc:
        raise HttpError(422, str(exc)) from None
    child.refresh_from_db()
    return Status(201, with_pending_count(child))


@router.post(
    "/runs/{run_id}/replay",
    response={200: ReplayOut, 403: Message, 404: Message},
    auth=OPERATORS,
    summary="Replay this run from its timeline (no model call, no side effect) and compare",
)
def replay_run(request: ApiRequest, run_id: UUID) -> dict[str, Any]:
    return replay(_run(request, run_id)).as_dict()


@router.post(
    "/imports",
    response={201: RunDetailOut, 403: Message, 413: Message, 422: Message},
    auth=ADMINS,
    summary="Import a run exported from another installation (JSON Lines or JSON body)",
    # Read raw (request.body), so declared here: the body is what the endpoint takes.
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/jsonl": {"schema": {}}, "application/json": {"schema": {}}},
        }
    },
)
def import_exported_run(request: HttpRequest) -> Status:
    if len(request.body) > MAX_IMPORT_BYTES:
        raise HttpError(413, f"an import is at most {MAX_IMPORT_BYTES} bytes")
    try:
        text = request.body.decode("utf-8")
        run = import_run(text)
    except UnicodeDecodeError:
        raise HttpError(422, "the file is not UTF-8 text") from None
    except ImportRefused as exc:
        raise HttpError(422, str(exc)) from None
    return Status(201, with_pending_count(run))
