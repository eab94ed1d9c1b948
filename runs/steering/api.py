"""The API of steering a live run (runs/steering/models.py): pause, resume, instructions for the
agent, and the choice for a failed step. Reading needs any role; steering the operator role
(admins hold every role), checked before the body is parsed. Every answer is the run's
steering state (SteerOut); refusals are 409 (a finished run, nothing to resume, a choice
made already) or 422 (empty or invalid input), with nothing changed."""

from datetime import datetime
from typing import Any, Literal
from uuid import UUID, uuid4

from ninja import Field, Router, Schema, Status
from ninja.errors import HttpError
from pydantic import ConfigDict

from accounts.requests import ApiRequest

from ..api import OPERATORS, Message, _get_run
from ..models import Instruction, Recovery, Run
from . import models as steering

router = Router(tags=["steering"])
RECENT_INSTRUCTIONS = 50


class PauseOut(Schema):
    requested_by: str | None
    requested_at: datetime
    paused_at: datetime | None = Field(
        description="When the run took the pause at a step boundary; null while it is asked."
    )


class RecoveryOut(Schema):
    id: int
    failed_seq: int
    tool: str
    args: dict[str, Any]
    error: str
    status: str
    choice: str
    edited_args: dict[str, Any] | None
    note: str
    decided_by: str | None
    decided_at: datetime | None


class InstructionOut(Schema):
    id: int
    text: str
    key: str
    by: str | None
    source: str
    created_at: datetime
    delivered_seq: int | None = Field(description="The operator step that gave it to the agent.")
    delivered_at: datetime | None


class ReopeningOut(Schema):
    choices: list[str] = Field(description="What may be chosen; empty: it cannot be reopened.")
    why_not: str
    failed_seq: int | None = Field(description="A failed call the agent was not told of yet.")


class SteerOut(Schema):
    run: UUID
    status: str
    status_detail: str
    pause: PauseOut | None
    recovery: RecoveryOut | None = Field(description="The failed step waiting for a choice.")
    instructions: list[InstructionOut] = Field(description="The newest first.")
    reopening: ReopeningOut | None = Field(description="A failed run: can it resume here?")


class InstructionIn(Schema):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=Instruction.MAX_CHARS)
    idempotency_key: str | None = Field(
        None,
        min_length=1,
        max_length=100,
        description="The same key again returns the instruction it made (200) instead of "
        "adding one, for as long as the run lives. The Idempotency-Key header is this key too "
        "(and, as on every call, a retry with it within its window gets the first answer "
        "again). Without either, every POST adds one.",
    )


class RecoveryIn(Schema):
    model_config = ConfigDict(extra="forbid")

    choice: Literal["retry", "skip", "instruct"]
    arguments: dict[str, Any] | None = Field(
        None, description="retry: the arguments to try instead (checked, then gated again)."
    )
    note: str = Field("", max_length=Instruction.MAX_CHARS, description="skip: the agent's result.")
    text: str = Field("", max_length=Instruction.MAX_CHARS, description="instruct: what instead.")


def _operable_run(request: ApiRequest, run_id: UUID) -> Run:
    """The run, if the caller's teams let them operate it (as cancel_run): 404 unseen, 403."""
    run = _get_run(request, run_id)
    if not Run.objects.operable_by(request.auth).filter(pk=run.pk).exists():
        raise HttpError(403, f"your teams may not steer runs of {run.agent}")
    return run


def _username(user) -> str | None:
    return user.get_username() if user is not None else None


def _state(run: Run) -> dict:
    run.refresh_from_db()
    pause = None
    if run.pause_requested_at is not None:
        pause = {
            "requested_by": _username(run.pause_requested_by),
            "requested_at": run.pause_requested_at,
            "paused_at": run.paused_at,
        }
    recovery = steering.open_recovery(run)
    instructions = run.instructions.select_related("by").order_by("-created_at", "-id")
    reopening = steering.reopening(run) if run.status == Run.Status.FAILED else None
    return {
        "reopening": {
            "choices": list(reopening.choices),
            "why_not": reopening.why_not,
            "failed_seq": reopening.failed_call.seq if reopening.failed_call else None,
        }
        if reopening
        else None,
        "run": run.pk,
        "status": run.status,
        "status_detail": run.status_detail,
        "pause": pause,
        "recovery": _recovery_out(recovery) if recovery else None,
        "instructions": [_instruction_out(i) for i in instructions[:RECENT_INSTRUCTIONS]],
    }


def _recovery_out(recovery: Recovery) -> dict:
    return {
        **{
            name: getattr(recovery, name)
            for name in ("failed_seq", "tool", "args", "error", "status", "choice", "note")
        },
        "id": recovery.pk,
        "edited_args": recovery.edited_args,
        "decided_by": _username(recovery.decided_by),
        "decided_at": recovery.decided_at,
    }


def _instruction_out(instruction: Instruction) -> dict:
    return {
        "id": instruction.pk,
        "text": instruction.shown_text,
        "key": instruction.key,
        "by": _username(instruction.by),
        "source": instruction.source,
        "created_at": instruction.created_at,
        "delivered_seq": instruction.delivered_seq,
        "delivered_at": instruction.delivered_at,
    }


def _served(action, *args, **kwargs):
    try:
        return action(*args, **kwargs)
    except steering.SteerError as exc:
        raise HttpError(exc.status, str(exc)) from exc


@router.get(
    "/runs/{run_id}/steer", response=SteerOut, summary="A run's pause, failed step, instructions"
)
def get_steering(request: ApiRequest, run_id: UUID) -> dict:
    return _state(_get_run(request, run_id))


@router.post(
    "/runs/{run_id}/pause",
    response={200: SteerOut, 403: Message, 404: Message, 409: Message},
    auth=OPERATORS,
    summary="Pause a run at its next step boundary (again: nothing more)",
)
def pause_run(request: ApiRequest, run_id: UUID) -> dict:
    run = _operable_run(request, run_id)
    _served(steering.request_pause, run, by=request.auth)
    return _state(run)


@router.post(
    "/runs/{run_id}/resume",
    response={200: SteerOut, 403: Message, 404: Message, 409: Message},
    auth=OPERATORS,
    summary="Resume a paused run, or withdraw a pause it has not taken yet",
)
def resume_run(request: ApiRequest, run_id: UUID) -> dict:
    run = _operable_run(request, run_id)
    _served(steering.resume, run, by=request.auth)
    return _state(run)


@router.post(
    "/runs/{run_id}/instructions",
    response={200: SteerOut, 201: SteerOut, 403: Message, 404: Message, 409: Message, 422: Message},
    auth=OPERATORS,
    summary="Send the agent an instruction for its next model turn",
)
def post_instruction(request: ApiRequest, run_id: UUID, payload: InstructionIn) -> Status:
    run = _operable_run(request, run_id)
    # Without a key every POST is an instruction of its own.
    key = payload.idempotency_key or request.headers.get("Idempotency-Key") or uuid4().hex
    _, new = _served(steering.instruct, run, text=payload.text, key=key, by=request.auth)
    return Status(201 if new else 200, _state(run))


@router.post(
    "/runs/{run_id}/recovery",
    response={200: SteerOut, 403: Message, 404: Message, 409: Message, 422: Message},
    auth=OPERATORS,
    summary="Choose what becomes of the failed step: retry, skip or instruct",
)
def post_recovery(request: ApiRequest, run_id: UUID, payload: RecoveryIn) -> dict:
    run = _operable_run(request, run_id)
    choice = steering.Choice(
        payload.choice, args=payload.arguments, note=payload.note, text=payload.text
    )
    _served(steering.choose, run, choice, by=request.auth)
    return _state(run)


@router.post(
    "/runs/{run_id}/reopen",
    response={200: SteerOut, 403: Message, 404: Message, 409: Message, 422: Message},
    auth=OPERATORS,
    summary="Resume a failed run from here: retry, skip or instruct (409 says why not)",
)
def reopen_run(request: ApiRequest, run_id: UUID, payload: RecoveryIn) -> dict:
    run = _operable_run(request, run_id)
    choice = steering.Choice(
        payload.choice, args=payload.arguments, note=payload.note, text=payload.text
    )
    _served(steering.reopen, run, choice, by=request.auth)
    return _state(run)
