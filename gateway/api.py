"""The gateway API: agents that run elsewhere ask agentops before their tool calls.
Why and how: docs/design/modules.md."""

from decimal import Decimal
from typing import Any
from uuid import UUID

from django.http import HttpRequest, JsonResponse
from django.urls import reverse
from ninja import Field, Router, Schema, Status
from ninja.decorators import decorate_view
from ninja.responses import NinjaJSONEncoder
from ninja.security import HttpBearer

from agentkit import tracing
from runs.api import refuse_large_bodies
from runs.models import Run

from . import egress, mcp_tools, sessions, waits
from .models import ExternalAgent, ExternalCall

MAX_WAIT_SECONDS = 30
TOOL_NAME = mcp_tools.TOOL_NAME
POLL_SECONDS = 0.5


class AgentToken(HttpBearer):
    """`Authorization: Bearer aoa_…`: the external agent the token belongs to."""

    def authenticate(self, request: HttpRequest, token: str) -> ExternalAgent | None:
        return ExternalAgent.authenticate(token)


router = Router(tags=["external agents"], auth=[AgentToken()])


class AgentRequest(HttpRequest):
    """A request past AgentToken: `auth` is the external agent (typed for the checker)."""

    auth: ExternalAgent


class SessionIn(Schema):
    session: str = Field("", max_length=200, description="The agent's own session id, if any.")
    metadata: dict = Field(default_factory=dict)


class SessionOut(Schema):
    session: UUID
    run_url: str


class CallIn(Schema):
    tool: str = Field(
        ...,
        pattern=TOOL_NAME,
        description="The tool's name: letters, digits, _ . - (at most 64, as MCP names are).",
    )
    args: dict = Field(default_factory=dict)
    hints: dict | None = Field(
        None, description='Risk of this call: {"reversible": false, "blast": "high"}.'
    )
    summary: str = Field("", description="What the agent is doing and why, for the approver.")
    callback_url: str = Field("", max_length=500)
    call_id: str = Field(
        "",
        max_length=200,
        pattern=r"^[\x21-\x7e]*$",
        description="Your own id for the call (an interrupt id, a tool_use_id): submitting it "
        "again, from any session of the agent, answers the same call.",
    )


class WithdrawIn(Schema):
    reason: str = Field("", description="Why the agent gave the call up (a timeout, ...).")


class McpToolsIn(Schema):
    tools: list[dict] = Field(..., description="MCP tool definitions, as tools/list returns.")


class ResultIn(Schema):
    result: Any = None
    error: str | None = None
    duration_ms: int = Field(0, ge=0)
    cost_usd: Decimal | None = Field(
        None, ge=0, description="What the call cost (a model call, a paid API): the session's cost."
    )


class CloseIn(Schema):
    status: str = Field("succeeded", description="succeeded or failed")
    output: str = ""
    detail: str = Field("", max_length=500)


def _error(status: int, detail: str, **extra) -> JsonResponse:
    return JsonResponse({"detail": detail, **extra}, status=status, encoder=NinjaJSONEncoder)


def _session(agent: ExternalAgent, session_id: UUID) -> Run | None:
    return Run.objects.filter(pk=session_id, trigger=Run.Trigger.EXTERNAL, agent=agent.slug).first()


def _call(agent: ExternalAgent, call_id: UUID) -> ExternalCall | None:
    return (
        ExternalCall.objects.select_related("run")
        .filter(pk=call_id, run__agent=agent.slug, run__trigger=Run.Trigger.EXTERNAL)
        .first()
    )


def _refused(exc: sessions.SessionError) -> JsonResponse:
    extra = {"errors": exc.errors} if exc.errors else {}
    return _error(exc.status, exc.message, **extra)


@router.post("/external/sessions", response={201: SessionOut})
@decorate_view(refuse_large_bodies)
def register_session(request: AgentRequest, payload: SessionIn):
    """Register a session of the calling agent: a run that shows in the runs list."""
    try:
        run = sessions.register(
            request.auth,
            session=payload.session,
            metadata=payload.metadata,
            # A `traceparent` header: the session's run joins the agent's trace.
            trace_headers=request.headers,
        )
    except sessions.SessionError as exc:
        return _refused(exc)
    return Status(201, {"session": run.pk, "run_url": reverse("runs:detail", args=[run.pk])})


@router.post("/external/sessions/{uuid:session_id}/calls")
@decorate_view(refuse_large_bodies)
def submit_call(request: AgentRequest, session_id: UUID, payload: CallIn):
    """Submit a tool call for review. 200 with the decision when policy allows it at once
    (recorded all the same); 202 when a person decides: then GET the call (long-poll)."""
    run = _session(request.auth, session_id)
    if run is None:
        return _error(404, "no such session")
    refused = payload.callback_url and egress.url_refusal(payload.callback_url)
    if refused:
        return _error(422, refused, errors={"callback_url": [refused]})
    attributes = {"agentops.run.id": str(run.pk), "gen_ai.tool.name": payload.tool}
    with tracing.in_run(
        "agentops.gateway.call", run.traceparent, attributes, carrier=request.headers
    ) as span:
        try:
            call = sessions.submit(
                run,
                request.auth,
                tool=payload.tool,
                args=payload.args,
                hints=payload.hints,
                summary=payload.summary,
                callback_url=payload.callback_url,
                client_id=payload.call_id,
            )
            state = sessions.state_of(call)
        except sessions.SessionError as exc:
            tracing.failed(span, "refused", exc.message)
            return _refused(exc)
        if span is not None:
            span.set_attribute("agentops.gateway.status", state.status)
    return JsonResponse(state.as_dict(), status=202 if not state.final else 200)


@router.get("/external/calls/{uuid:call_id}")
async def get_call(request: HttpRequest, call_id: UUID, wait: float = 0):
    """The call's decision. With `wait` (seconds, at most 30) the answer waits until a
    person decides or the time is up; `status` is "pending" until then.

    Under daphne this path is served by gateway/waits.py outside Django's middleware (a
    waiting call holds no thread and no database connection); this view documents it and
    serves other hosts (the test client) through the same `call_state`."""
    if not 0 <= wait <= MAX_WAIT_SECONDS:
        return _error(422, f"wait must be between 0 and {MAX_WAIT_SECONDS} seconds")
    token = request.headers.get("Authorization", "").partition(" ")[2].strip()
    status, body = await waits.call_state(token, str(call_id), wait, own_thread=True)
    return JsonResponse(body, status=status, encoder=NinjaJSONEncoder)


@router.post("/external/calls/{uuid:call_id}/result")
@decorate_view(refuse_large_bodies)
def report_result(request: AgentRequest, call_id: UUID, payload: ResultIn):
    """What the call did: `result` (any JSON) or `error`. Recorded as the run's tool step."""
    call = _call(request.auth, call_id)
    if call is None:
        return _error(404, "no such call")
    try:
        step = sessions.report_result(
            call,
            result=payload.result,
            error=payload.error,
            duration_ms=payload.duration_ms,
            cost_usd=payload.cost_usd,
        )
    except sessions.SessionError as exc:
        return _refused(exc)
    return {"call": str(call.pk), "step": step.seq}


@router.post("/external/calls/{uuid:call_id}/withdraw")
@decorate_view(refuse_large_bodies)
def withdraw_call(request: AgentRequest, call_id: UUID, payload: WithdrawIn):
    """The agent gave the call up (its framework timed it out or cancelled it): it will
    never run. A pending approval is withdrawn ("withdrawn by the agent"). Idempotent; 409
    once a result was reported."""
    call = _call(request.auth, call_id)
    if call is None:
        return _error(404, "no such call")
    try:
        call = sessions.withdraw(call, reason=payload.reason)
    except sessions.SessionError as exc:
        return _refused(exc)
    return sessions.state_of(call).as_dict()


@router.post("/external/sessions/{uuid:session_id}/close")
@decorate_view(refuse_large_bodies)
def close_session(request: AgentRequest, session_id: UUID, payload: CloseIn):
    """End the session: `status` succeeded or failed. A pending call is cancelled with a
    failed session; a session with one cannot succeed (409)."""
    if payload.status not in ("succeeded", "failed"):
        return _error(422, "status must be succeeded or failed")
    run = _session(request.auth, session_id)
    if run is None:
        return _error(404, "no such session")
    try:
        run = sessions.close(
            run,
            succeeded=payload.status == "succeeded",
            output=payload.output,
            detail=payload.detail,
        )
    except sessions.SessionError as exc:
        return _refused(exc)
    return {"session": str(run.pk), "status": run.status}


@router.post("/external/tools/mcp")
def register_mcp_tools(request: AgentRequest, payload: McpToolsIn):
    """Upsert the calling agent's tools from MCP tool definitions (name, inputSchema,
    annotations -> risk). A registration may raise a tool's risk, never lower it."""
    try:
        done = mcp_tools.register(request.auth, payload.tools)
    except mcp_tools.DefinitionError as exc:
        return _error(422, str(exc), errors={"tools": [str(exc)]})
    return {"tools": [r.as_dict() for r in done]}
