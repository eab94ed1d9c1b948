"""The approvals API: the queue, one approval with its context, decisions, approver statistics.

Reading needs any role; deciding goes through approvals.decisions (which checks who may
decide); statistics and the decisions export are for admins and teams' administrators
(approvals/oversight_reach.py). Errors are JSON `{"detail": ..., ...}` with 403, 404, 409 or
422, never a 500.
"""

from datetime import timedelta
from uuid import UUID

from django.http import JsonResponse
from django.utils import timezone
from ninja import Router, Schema
from ninja.responses import NinjaJSONEncoder

from accounts.requests import ApiRequest
from agentkit.agents import get_agent
from agentkit.tools import get_tool
from runs import api_paging
from runs.api import MAX_LIST_OFFSET
from runs.models import Run, Step, args_hash, canonical_json

from . import batch, decisions, listing, oversight_reach, permissions
from .evidence import card as evidence
from .evidence import export as evidence_export
from .evidence import views as export_views
from .learning import stats
from .models import Approval, ApprovalView, Plan

router = Router(tags=["approvals"])

MAX_PAGE = 200
RECENT_STEPS = 10
TEXT_MAX = 2000


class DecisionIn(Schema):
    decision: str
    arguments: dict | None = None
    reason: str = ""
    answer: str = ""
    # The `arguments_hash` of the call the client showed its user: an approve of any other
    # call is 409. Optional, for clients written before it existed.
    shown_args_hash: str | None = None
    # The `preview.hash` the client showed: an approve after the data changed is 409 with
    # the fresh preview. Without it, the stored preview is what was shown.
    shown_preview_hash: str | None = None


def _error(http_status: int, detail: str, **extra) -> JsonResponse:
    return JsonResponse({"detail": detail, **extra}, status=http_status, encoder=NinjaJSONEncoder)


def _user(request: ApiRequest):
    return request.auth  # set by the API's authenticators (token or session)


def _get(approval_id: UUID, user) -> Approval | None:
    return (
        Approval.objects.visible_to(user)
        .select_related("run", "run__launched_by", "decided_by")
        .filter(pk=approval_id)
        .first()
    )


# --- the queue ---------------------------------------------------------------------------------
@router.get("")
def list_approvals(
    request: ApiRequest,
    status: str = "pending",
    agent: str = "",
    risk: str = "",
    assigned_to_me: bool = False,
    limit: int = 50,
    offset: int = 0,
    cursor: str | None = None,
):
    """Approvals, most risky first, then nearest deadline (the queue's order, approvals/
    listing.py). `status=all` lists every status; `assigned_to_me` keeps those the caller may
    decide now. Paged by `cursor` (a page's `next_cursor`: decisions and new approvals never
    shift the pages after it) or, up to 10 000 rows deep, by `offset`; `count` stops at
    10 000 (`count_capped`)."""
    user = _user(request)
    if not user.can_view:
        return _error(403, "your account has no role that can see approvals")
    errors: dict[str, list[str]] = {}
    if status not in (*Approval.Status.values, "all"):
        errors["status"] = [f"one of {', '.join(Approval.Status.values)}, all"]
    if risk and risk not in Approval.Risk.values:
        errors["risk"] = [f"one of {', '.join(Approval.Risk.values)}"]
    if not 1 <= limit <= MAX_PAGE:
        errors["limit"] = [f"between 1 and {MAX_PAGE}"]
    if not 0 <= offset <= MAX_LIST_OFFSET:
        errors["offset"] = [f"between 0 and {MAX_LIST_OFFSET}: deeper, page with `cursor`"]
    after = None
    if cursor is not None:
        too_long = len(cursor) > api_paging.CURSOR_MAX_LENGTH
        after = None if too_long else listing.Cursor.parse(api_paging.decode(cursor))
        if after is None:
            errors["cursor"] = ["not a page's cursor (give a page's next_cursor)"]
        elif offset:
            errors["cursor"] = ["give `offset` or `cursor`, not both"]
    if errors:
        return _error(422, "invalid filters", errors=errors)

    qs = Approval.objects.visible_to(user).select_related("run", "decided_by")
    if status != "all":
        qs = qs.filter(status=status)
    if status == Approval.Status.PENDING:
        # A pending approval of a finished run can no longer be decided (the sweep closes it).
        qs = qs.filter(run__status__in=Run.ACTIVE_STATUSES)
    if agent:
        qs = qs.filter(run__agent=agent)
    if risk:
        qs = qs.filter(risk=risk)
    qs = listing.in_queue_order(qs).select_related("decided_by")
    if assigned_to_me:
        # Who may decide is a rule in Python (approvals/permissions.py), not a column: every
        # pending approval is read, and the cursor compared here in the same order.
        pending = qs.filter(status=Approval.Status.PENDING)
        mine = [a for a in pending if permissions.may_decide(a, user)]
        counted = {
            "count": min(len(mine), api_paging.COUNT_CAP),
            "count_capped": len(mine) > api_paging.COUNT_CAP,
        }
        if after is not None:
            mine = [a for a in mine if listing.Cursor.of(a).key > after.key]
        page = mine[offset : offset + limit + 1]
    else:
        counted = api_paging.capped_count(qs)
        rows = qs.filter(after.later()) if after is not None else qs
        page = list(rows[offset : offset + limit + 1])
    more = len(page) > limit
    return {
        "items": [_summary(a, user) for a in page[:limit]],
        **counted,
        "next_cursor": api_paging.encode(listing.Cursor.of(page[limit - 1]).token)
        if more
        else None,
    }


def _summary(approval: Approval, user) -> dict:
    run = approval.run
    why_not = _why_not(approval, user)
    return {
        "id": approval.pk,
        "run": run.pk,
        "agent": run.agent,
        "kind": approval.kind,
        "status": approval.status,
        "tool": approval.tool,
        "arguments": approval.final_args,
        "question": approval.question,
        "options": approval.options,
        "explanation": approval.explanation,
        "risk": approval.risk,
        "sampled": approval.sampled,
        "requested_at": approval.requested_at,
        "expires_at": approval.expires_at,
        "decided_at": approval.decided_at,
        "decided_by": approval.decided_by.get_username() if approval.decided_by else None,
        "can_decide": not why_not,
    }


def _why_not(approval: Approval, user) -> str:
    if approval.status != Approval.Status.PENDING:
        return f"already {approval.status}"
    if approval.run.is_terminal:
        return f"the run is {approval.run.status}"
    return permissions.forbidden_reason(approval, approval.run, user, "approve")


# --- statistics (the uuid converter keeps /stats apart from /{id}) ------------------------------
@router.get("/stats")
def approver_stats(request: ApiRequest, days: int = 30, team: str = ""):
    """Rubber-stamp guard figures: every agent's for admins (or one team's, `team`), their
    teams' agents' for a team's administrators."""
    user = _user(request)
    if not oversight_reach.may_oversee(user):
        return _error(403, "approver statistics are for admins and teams' administrators")
    if not 1 <= days <= 3650:
        return _error(422, "invalid filters", errors={"days": ["between 1 and 3650"]})
    try:
        agents = oversight_reach.agents_for(user, team=team)
    except oversight_reach.OutOfReach as exc:
        return _error(422, "invalid filters", errors={"team": [str(exc)]})
    return stats.approver_stats(since=timezone.now() - timedelta(days=days), agents=agents)


# --- compliance evidence -------------------------------------------------------------------------
@router.get("/export")
def decisions_export(
    request: ApiRequest,
    since: str = "",
    until: str = "",
    format: str = "jsonl",
    agent: str = "",
    team: str = "",
):
    """The signed decisions export of a period, streamed as CSV or JSON Lines: every agent's
    for admins (`team` narrows it to one team's), their teams' agents' for a team's
    administrators; see docs/admins/compliance-evidence.md. Bad dates, format, agent or team are 400
    with the reason."""
    user = _user(request)
    if not oversight_reach.may_oversee(user):
        return _error(403, "the decisions export is for admins and teams' administrators")
    try:
        start, end, fmt, agent = evidence_export.checked_request(since, until, format, agent)
        agents = oversight_reach.agents_for(user, team=team, agent=agent)
    except (evidence_export.ExportError, oversight_reach.OutOfReach) as exc:
        return _error(400, str(exc))
    return export_views.download(
        request, since=start, until=end, fmt=fmt, agent=agent, agents=agents, team=team.strip()
    )


# --- one approval --------------------------------------------------------------------------------
@router.get("/{uuid:approval_id}")
def get_approval(request: ApiRequest, approval_id: UUID):
    """Everything an approver needs to decide. Reading writes nothing (GET is safe); a client
    that wants its time-to-decide measured from here POSTs to `/open` instead."""
    user = _user(request)
    approval = _get(approval_id, user)
    if approval is None:
        return _error(404, "no such approval")
    view = ApprovalView.objects.filter(approval=approval, user=user).first()
    return _detail(approval, user, opened_at=view.first_opened_at if view else None)


@router.post("/{uuid:approval_id}/open")
def open_approval(request: ApiRequest, approval_id: UUID):
    """The same as GET, and records that the caller opened it: time to decide (the
    rubber-stamp guard) is measured from the first open. Later opens keep the first time."""
    user = _user(request)
    approval = _get(approval_id, user)
    if approval is None:
        return _error(404, "no such approval")
    view = decisions.record_open(approval, user)
    return _detail(approval, user, opened_at=view.first_opened_at if view else None)


@router.post("/{uuid:approval_id}/decision")
def post_decision(request: ApiRequest, approval_id: UUID, payload: DecisionIn):
    """Approve (with `arguments` to edit), reject (with a `reason`) or answer a question.
    With `shown_args_hash` (the detail's `arguments_hash`), an approve of another call is 409.
    Answers with the approval as decided (status, decided_by, the arguments that run, votes);
    its run's context is in GET /api/approvals/{id}."""
    user = _user(request)
    if _get(approval_id, user) is None:
        # Not one this caller's teams see: as if it did not exist.
        return _error(404, "no such approval")
    try:
        approval = decisions.decide(
            approval_id,
            user=user,
            decision=payload.decision,
            arguments=payload.arguments,
            reason=payload.reason,
            answer=payload.answer,
            shown_args_hash=payload.shown_args_hash,
            shown_preview_hash=payload.shown_preview_hash,
            via="api",
        )
    except Approval.DoesNotExist:
        return _error(404, "no such approval")
    except decisions.PreviewChanged as exc:
        return _error(409, exc.message, approval_status=exc.approval_status, preview=exc.preview)
    except decisions.DecisionConflict as exc:
        return _error(
            409,
            exc.message,
            approval_status=exc.approval_status,
            decided_by=exc.decided_by,
            decided_at=exc.decided_at,
        )
    except decisions.DecisionInvalid as exc:
        return _error(422, exc.message, errors=exc.errors)
    except decisions.DecisionForbidden as exc:
        return _error(403, exc.message)
    return _decided(approval, user)


def _decided(approval: Approval, user) -> dict:
    """A decision's answer: the approval as it now stands (status, who, when, the call that
    runs, the votes), from what the decision holds, without reading it back. The run's
    context is what the approver read before deciding; GET the approval for it again."""
    return {
        **_summary(approval, user),
        "original_arguments": approval.args,
        "arguments_hash": args_hash(approval.tool, approval.args or {}),
        "edited_arguments": approval.edited_args,
        "reason": approval.reason,
        "answer": approval.answer,
        "votes_needed": permissions.votes_needed(approval, permissions.gate_rules(approval.run)),
        "votes": _votes(approval),
    }


def _votes(approval: Approval) -> list[dict]:
    return [
        {
            "by": v.username,
            "decision": v.decision,
            "edited": v.edited,
            "reason": v.reason,
            "decided_at": v.decided_at,
        }
        for v in approval.votes.all()
    ]


def _detail(approval: Approval, user, *, opened_at=None) -> dict:
    run = approval.run
    rules = permissions.gate_rules(run)
    launched = run.steps.filter(seq=1).values_list("data", flat=True).first() or {}
    agent = get_agent(run.agent)
    steps = list(run.steps.order_by("-seq")[:RECENT_STEPS])
    return {
        **_summary(approval, user),
        "why_not": _why_not(approval, user),
        "original_arguments": approval.args,
        # Send it back as `shown_args_hash` with a decision: the server then approves only
        # this exact call.
        "arguments_hash": args_hash(approval.tool, approval.args or {}),
        "edited_arguments": approval.edited_args,
        "reason": approval.reason,
        "answer": approval.answer,
        "context": approval.context_summary,
        # What the call would change (before/after per record), or null: send its `hash`
        # back as `shown_preview_hash` with an approve.
        "preview": approval.preview,
        # What the PII guard found in the call (kind, argument, masked value); [] otherwise.
        "pii_findings": evidence.pii_findings(approval),
        "on_expiry": approval.on_expiry,
        "opened_at": opened_at,
        "votes_needed": permissions.votes_needed(approval, rules),
        "votes": _votes(approval),
        "tool_info": _tool_info(run, approval.tool),
        # A plan (kind "plan"): its id for GET /api/plans/{id} and its decision endpoint.
        "plan_id": _plan_id(approval),
        "run_context": {
            "id": run.pk,
            "agent": run.agent,
            "agent_title": agent.title if agent else run.agent,
            "status": run.status,
            "goal": launched.get("prompt", ""),
            "input": approval.masked(run.input),
            "launched_by": run.launched_by.get_username() if run.launched_by else None,
            "trigger": run.trigger,
            "steps": run.step_count,
            "cost_usd": run.cost_usd,
            "max_cost_usd": run.max_cost_usd,
            "created_at": run.created_at,
        },
        "recent_steps": [_step(s) for s in reversed(steps)],
    }


def _plan_id(approval: Approval) -> int | None:
    if approval.kind != Approval.Kind.PLAN:
        return None
    return Plan.objects.filter(approval=approval).values_list("pk", flat=True).first()


def _tool_info(run: Run, name: str) -> dict | None:
    # The run's snapshot is what the agent was given; the registry is the fallback.
    for meta in run.agent_config.get("tools", []):
        if meta.get("name") == name:
            return meta
    tool = get_tool(name)
    return tool.metadata() if tool else None


def _step(step: Step) -> dict:
    data = step.data
    out: dict = {"seq": step.seq, "kind": step.kind, "at": step.created_at}
    if step.kind == Step.Kind.LLM:
        out["text"] = _clip(
            "".join(b.get("text", "") for b in data.get("content", []) if b.get("type") == "text")
        )
        out["tool_calls"] = [
            {"tool": b.get("name"), "input": b.get("input")}
            for b in data.get("content", [])
            if b.get("type") == "tool_use"
        ]
    elif step.kind == Step.Kind.TOOL:
        out.update(tool=data.get("tool"), args=data.get("args"), is_error=data.get("is_error"))
        out["result"] = _clip(data.get("error") if data.get("is_error") else data.get("result"))
    elif step.kind in (Step.Kind.GATE, Step.Kind.DECISION):
        keep = ("approval", "tool", "decision", "status", "by", "explanation", "reason", "answer")
        out.update({k: data[k] for k in keep if k in data})
    else:
        out.update({k: data.get(k) for k in ("event", "from", "to", "reason", "detail")})
    return out


def _clip(value):
    # Tool results can be large; the timeline keeps them whole.
    text = value if isinstance(value, str) else canonical_json(value)
    if len(text) <= TEXT_MAX:
        return value
    return text[:TEXT_MAX] + "…"


# --- batch decisions -----------------------------------------------------------------------------
class BatchItemIn(Schema):
    id: str
    # The `arguments_hash` of the call the client showed for this approval: an item whose call
    # is not that one is not decided.
    args_hash: str


class BatchIn(Schema):
    decision: str  # approve or reject
    reason: str = ""
    items: list[BatchItemIn]


@router.post("/batch")
def post_batch(request: ApiRequest, payload: BatchIn):
    """Approve or reject an explicit set of approvals, each bound to the call shown
    (approvals/batch.py). 200 with a result per item (decided, voted, conflict, refused,
    invalid, not_found), or 422 with nothing decided when the batch itself is wrong."""
    user = _user(request)
    if not user.can_approve:
        return _error(403, "only approvers and admins can decide approvals")
    try:
        results = batch.decide_batch(
            user=user,
            decision=payload.decision,
            items=[(item.id, item.args_hash) for item in payload.items],
            reason=payload.reason,
        )
    except batch.BatchInvalid as exc:
        return _error(422, exc.message, errors=exc.errors)
    return {"results": [r.as_dict() for r in results]}
