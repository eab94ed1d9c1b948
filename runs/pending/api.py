"""The API of pending operations: the callback that completes one, and what operators do.

POST /api/pending/<token> is called by the outside world (a supplier's system, a mail
gateway) with the URL a tool handed on (`ToolContext.callback_url`): no user, no session,
hence no CSRF token; the signed token is the credential and names one operation. The body is
`{"result": <any JSON>}` (completed) or `{"error": "<why>"}` (failed). A repeat of the
outcome recorded is 200 again; another outcome after it is 409.
"""

import json
from typing import Any
from uuid import UUID

from django.http import HttpRequest
from ninja import Router, Schema
from ninja.decorators import decorate_view
from ninja.errors import HttpError

from accounts.requests import ApiRequest

from ..api import OPERATORS, READERS, Message, _get_run, refuse_large_bodies
from ..models import PendingOperation
from .models import AlreadyFinished, finish, operation_for_token

router = Router(tags=["pending operations"])


class OperationOut(Schema):
    id: int
    run: UUID
    tool: str
    awaits: str
    completion: str
    status: str
    deadline: str
    created_at: str
    finished_at: str | None
    finished_by: str
    result: Any = None

    @staticmethod
    def of(op: PendingOperation) -> "OperationOut":
        return OperationOut(
            id=op.pk,
            run=op.run_id,
            tool=op.tool,
            awaits=op.awaits,
            completion=op.completion,
            status=op.status,
            deadline=op.deadline.isoformat(),
            created_at=op.created_at.isoformat(),
            finished_at=op.finished_at.isoformat() if op.finished_at else None,
            finished_by=op.finished_by,
            result=op.result,
        )


class CallbackOut(Schema):
    operation: int
    status: str


def outcome_of(body: Any) -> tuple[str, dict]:
    """(status, finish keywords) from a callback's or an operator's body; 422 otherwise."""
    if not isinstance(body, dict) or ("result" in body) == ("error" in body):
        raise HttpError(422, 'the body must be {"result": <any JSON>} or {"error": "<why>"}')
    if "result" in body:
        return PendingOperation.Status.COMPLETED, {"result": body["result"]}
    if not isinstance(body["error"], str) or not body["error"].strip():
        raise HttpError(422, '"error" must be a non-empty string')
    return PendingOperation.Status.FAILED, {"error": body["error"].strip()[:2000]}


def finish_or_conflict(op: PendingOperation, body: Any, by: str) -> PendingOperation:
    status, outcome = outcome_of(body)
    try:
        return finish(op.pk, status, by=by, **outcome)
    except AlreadyFinished as exc:
        raise HttpError(409, str(exc)) from None


@router.post(
    "/pending/{token}",
    auth=None,
    response={200: CallbackOut, 400: Message, 404: Message, 409: Message, 413: Message},
    summary="Complete a pending operation (its callback URL)",
    description=__doc__,
    # Read raw (request.body), so declared here: the body is what the endpoint takes.
    openapi_extra={"requestBody": {"content": {"application/json": {"schema": {}}}}},
)
@decorate_view(refuse_large_bodies)
def callback(request: HttpRequest, token: str) -> dict:
    op = operation_for_token(token)
    if op is None:
        raise HttpError(404, "no pending operation has this callback URL")
    try:
        body = json.loads(request.body)
    except ValueError:
        raise HttpError(400, "the body is not JSON") from None
    op = finish_or_conflict(op, body, by="callback")
    return {"operation": op.pk, "status": op.status}


@router.get(
    "/runs/{run_id}/pending",
    response=list[OperationOut],
    auth=READERS,
    summary="What a run awaits, and what it awaited",
)
def list_operations(request: ApiRequest, run_id: UUID) -> list[OperationOut]:
    run = _get_run(request, run_id)
    return [OperationOut.of(op) for op in run.pending_operations.all()]


class OperatorOutcome(Schema):
    result: Any = None
    error: str | None = None


@router.post(
    "/runs/{run_id}/pending/{op_id}",
    response={200: OperationOut, 403: Message, 404: Message, 409: Message, 422: Message},
    auth=OPERATORS,
    summary="Mark a pending operation done or failed (an operator)",
)
def operator_finish(request: ApiRequest, run_id: UUID, op_id: int, payload: OperatorOutcome):
    run = _get_run(request, run_id)
    op = run.pending_operations.filter(pk=op_id).first()
    if op is None:
        raise HttpError(404, f"run {run.pk} has no operation #{op_id}")
    body = payload.dict(exclude_unset=True)
    op = finish_or_conflict(op, body, by=f"operator {request.auth.get_username()}")
    return OperationOut.of(op)
