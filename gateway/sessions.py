"""An external agent's session as a run: registering it, its calls through the gate policy,
what it reports happened, and its end.
Why and how: docs/design/modules.md."""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from agentkit import tracing
from agentkit.tools import MAX_CALL_COST_USD, ToolArgsError, call_cost
from approvals import decisions, engine_gates, wait_traces
from approvals.decisions import HALTED
from approvals.gates import cascade
from approvals.gates import checks as gate_checks
from approvals.gates import config as gate_config
from approvals.models import Approval
from runs import events, sql
from runs.models import RUN_COLUMNS, STEP_COLUMNS, Run, Step, args_hash, canonical_json

from . import wakeups
from .call_tools import EXTERNAL_USE_PREFIX, CheckedCall, checked_call
from .models import ExternalAgent, ExternalCall

PROVIDER = "external"
SUMMARY_MAX = 4000  # characters of a call's summary for the approver

# What became of a call, as the agent is told.
ALLOWED, PENDING, WITHDRAWN = "allowed", "pending", "withdrawn"


class SessionError(Exception):
    """A refusal the API maps to its status (`status`): nothing was written."""

    def __init__(self, status: int, message: str, errors: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.errors = status, message, errors or {}


def max_bytes() -> int:
    """What one value an agent sends (arguments, metadata, a result) may weigh: the limit a
    run's input has (AGENTOPS_MAX_INPUT_BYTES), counted the same way."""
    return int(settings.AGENTOPS["MAX_INPUT_BYTES"])


def _capped(what: str, value: Any) -> None:
    """413 for a value larger than a run's input may be (its canonical JSON)."""
    size = len(canonical_json(value).encode())
    if size > max_bytes():
        raise SessionError(413, f"{what} is {size} bytes; the limit is {max_bytes()}")


def register(
    agent: ExternalAgent,
    *,
    session: str = "",
    metadata: dict | None = None,
    trace_headers: Mapping[str, str] | None = None,
) -> Run:
    """A running run for a new session of `agent` (its snapshot taken now). A W3C
    `traceparent` in `trace_headers` makes the run's span a child of the agent's."""
    _capped("metadata", metadata or {})
    now = timezone.now()
    try:
        config = agent.snapshot()
    except ValueError as exc:  # an admin saved broken rules past the form
        raise SessionError(422, f"this agent's gate rules are invalid: {exc}") from None
    # Never a session under rules that gate nothing of what they name (a typo'd tool).
    named = gate_config.named_users(config["gates"])
    found = gate_config.problems(config, existing_users=gate_checks.existing_users(named))
    if found:
        raise SessionError(
            422,
            f"this agent's gate rules cannot be applied: {'; '.join(found)}",
            errors={"gates": found},
        )
    limits = config["limits"]
    run = Run(
        agent=agent.slug,
        agent_config=config,
        provider=PROVIDER,
        input={"session": session, "metadata": metadata or {}},
        input_summary=(f"session {session}" if session else "external session")[:200],
        status=Run.Status.RUNNING,
        trigger=Run.Trigger.EXTERNAL,
        max_steps=limits["max_steps"],
        max_cost_usd=limits["max_cost_usd"],
        max_seconds=limits["max_seconds"],
        max_consecutive_errors=limits["max_consecutive_errors"],
        created_at=now,
        started_at=now,
        updated_at=now,
        traceparent=tracing.new_run_traceparent(trace_headers),
    )
    run.source = f"external {agent.slug} session {session or run.pk}"[:200]
    step = run.first_step(by=None, input=run.input, provider=PROVIDER)
    with transaction.atomic():
        sql.insert_all([(run, RUN_COLUMNS, (), ()), (step, STEP_COLUMNS, (), ())])
        events.publish_step_on_commit(step)
    return run


def submit(
    run: Run,
    agent: ExternalAgent,
    *,
    tool: str,
    args: Any,
    hints: Any = None,
    summary: str = "",
    callback_url: str = "",
    client_id: str = "",
) -> ExternalCall:
    """Record a proposed call and put it through the gate policy: allowed at once, or an
    approval opened and the run waiting for it.

    `client_id`, the agent's own id for the call (an interrupt id, a tool_use_id), makes the
    submission idempotent across the agent's sessions: the same id again is the call made
    the first time (its approval, its decision), never a second one; with other arguments
    it is a 409."""
    _capped("args", args)
    if len(summary or "") > SUMMARY_MAX:
        raise SessionError(413, f"summary is {len(summary)} characters; the limit is {SUMMARY_MAX}")
    registered = agent.tools.filter(name=tool).first()
    try:
        checked = checked_call(registered, tool, hints, args)
    except ToolArgsError as exc:
        raise SessionError(422, str(exc), {"args": [str(exc)]}) from None
    except ValueError as exc:
        raise SessionError(422, str(exc), {"hints": [str(exc)]}) from None
    summary = summary or ""
    key = f"{agent.slug}:{client_id}" if client_id else ""
    existing = ExternalCall.objects.filter(client_key=key).first() if key else None
    if existing is not None:
        return _same_call(existing, tool, checked.args, client_id)
    try:
        # One lock for the session's limits and the call: no other call of the session
        # comes between the check and the record.
        with transaction.atomic():
            run = _locked_open(run.pk)
            stop = limit_reached(run) or unsound_gates(run)
            if stop is None:
                return _record(run, tool, checked, summary, callback_url, key)
            _end(run, Run.Status.FAILED, *stop)
    except IntegrityError:
        if not key:
            raise
        # The same id submitted at the same moment: the other request made the call.
        return _same_call(ExternalCall.objects.get(client_key=key), tool, checked.args, client_id)
    # The termination is committed; the call is refused.
    reason, detail = stop
    raise SessionError(409, f"the session was stopped: {Run.Termination(reason).label} ({detail})")


def _same_call(call: ExternalCall, tool: str, args: dict, client_id: str) -> ExternalCall:
    if (call.tool, call.args) != (tool, args):
        raise SessionError(
            409, f"call id {client_id!r} was already used for another call ({call.tool})"
        )
    return call


def _record(
    run: Run, tool: str, checked: CheckedCall, summary: str, callback_url: str, key: str
) -> ExternalCall:
    """The call, its step and, when gated, its approval and the session's wait. Under the
    run's row lock."""
    args = checked.args
    call = ExternalCall(
        client_key=key,
        run=run,
        tool=tool,
        args=args,
        tool_meta=checked.meta,
        summary=summary,
        callback_url=callback_url,
    )
    verdict = cascade.external_verdict(run, checked.spec, args)
    run.append_step(
        Step.Kind.STATUS,
        {
            "event": "call",
            "call": str(call.pk),
            "tool": tool,
            "args": args,
            "summary": summary,
            "gated": verdict.gated,
            "risk": verdict.risk,
            "explanation": verdict.explanation,
        },
        # A call is the session's step: max_steps counts them.
        update={"step_count": run.step_count + 1},
    )
    if verdict.gated:
        item = {
            "llm_seq": run.last_seq,
            "id": f"{EXTERNAL_USE_PREFIX}{call.pk}",
            "name": tool,
            "args": args,
        }
        call.approval_id = cascade.open_external(run, item, verdict, summary)
        _park(run)
    call.save(force_insert=True)
    return call


def limit_reached(run: Run) -> tuple[str, str] | None:
    """(termination reason, detail) when the session may make no more calls: the engine's
    terminator rules (runs/engine/terminator.py) with a call for a model step. Steps: calls
    submitted; cost: what the agent reported with its results; time: working time, not
    counting waits for people; errors: results reported as errors in a row."""
    if run.step_count >= run.max_steps:
        return Run.Termination.MAX_STEPS, f"{run.step_count} of {run.max_steps} steps used"
    if run.consecutive_errors >= run.max_consecutive_errors:
        return (
            Run.Termination.CONSECUTIVE_ERRORS,
            f"{run.consecutive_errors} consecutive errors (limit {run.max_consecutive_errors})",
        )
    if run.cost_usd >= run.max_cost_usd:
        return (
            Run.Termination.MAX_COST,
            f"spent {run.cost_usd:.4f} USD; the limit is {run.max_cost_usd} USD",
        )
    working = run.working_seconds
    if working >= run.max_seconds:
        detail = f"{working:.0f}s of {run.max_seconds}s"
        if run.waiting_seconds:
            detail += f" (not counting {run.waiting_seconds:.0f}s waiting for people)"
        return Run.Termination.MAX_SECONDS, detail
    return None


def unsound_gates(run: Run) -> tuple[str, str] | None:
    """(termination reason, detail) when the session's snapshot has gate rules the policy
    cannot apply: registration refuses them, and a session written otherwise (an older
    version, a hand-made row) takes no call either, as the engine takes no step of such a
    run (runs/engine/terminator.py refuse_unsound_gates)."""
    found = gate_config.problems(run.agent_config)
    if not found:
        return None
    return (
        Run.Termination.BLOCKED,
        f"the agent's gate rules cannot be applied, nothing was run: {'; '.join(found)}",
    )


def _park(run: Run) -> None:
    waiting = engine_gates.pending_count(run)
    if run.status != Run.Status.RUNNING:
        return  # already waiting for an earlier call of the session
    run.park(
        f"waiting for {waiting} decision(s)",
        reason="waiting for a human",
        note=f"{waiting} pending decision(s)",
    )


@dataclass(frozen=True)
class CallState:
    """What the agent is told about one call."""

    call: ExternalCall
    status: str  # allowed, pending, approved, rejected, expired, cancelled
    args: dict  # what it may run: the approver's edit, if any
    reason: str = ""
    decided_by: str | None = None
    decided_at: Any = None

    @property
    def approved(self) -> bool:
        return self.status in (ALLOWED, Approval.Status.APPROVED)

    @property
    def final(self) -> bool:
        return self.status != PENDING

    def as_dict(self) -> dict:
        approval = self.call.approval_id
        return {
            "call": str(self.call.pk),
            "session": str(self.call.run_id),
            "tool": self.call.tool,
            "status": self.status,
            "approved": self.approved,
            "args": self.args if self.approved else None,
            "args_hash": args_hash(self.call.tool, self.args) if self.approved else None,
            "edited": self.approved and self.args != self.call.args,
            "reason": self.reason,
            "decided_by": self.decided_by,
            "decided_at": self.decided_at.isoformat() if self.decided_at else None,
            "approval": str(approval) if approval else None,
        }


def state_of(call: ExternalCall) -> CallState:
    """The call's decision as it stands (reads the approval afresh)."""
    if call.withdrawn_at is not None:
        return CallState(
            call, WITHDRAWN, call.args, "withdrawn by the agent", None, call.withdrawn_at
        )
    if call.approval_id is None:
        return CallState(call, ALLOWED, call.args)
    approval = Approval.objects.select_related("decided_by", "run").get(pk=call.approval_id)
    if approval.status == Approval.Status.EXPIRED and approval.on_expiry == "halt":
        halted = _halted(call, approval)
        if halted is not None:
            return halted
    by = approval.decided_by.get_username() if approval.decided_by else None
    if approval.status == Approval.Status.APPROVED:
        # The approval binds the arguments: only those whose hash was approved are handed
        # back (the decision service stores the hash of exactly what it approved).
        final = approval.final_args
        if args_hash(call.tool, final) != approval.approved_args_hash:
            raise SessionError(409, "the approved arguments do not match their recorded hash")
        return CallState(call, approval.status, final, "", by, approval.decided_at)
    reason = approval.reason
    if approval.status == Approval.Status.EXPIRED:
        reason = reason or "nobody decided before the approval expired"
    elif approval.status == Approval.Status.CANCELLED:
        reason = reason or "the session was cancelled"
    return CallState(call, approval.status, call.args, reason, by, approval.decided_at)


def _halted(call: ExternalCall, approval: Approval) -> CallState | None:
    """A call whose expiry halted its session: it waits (pending, the status line says why)
    until an operator resumes the session (then it expired: the agent is told it was not
    executed, None here) or cancels it (cancelled)."""
    run = approval.run
    if run.status == Run.Status.CANCELLED:
        reason = "the session was cancelled while halted: nobody decided in time"
        return CallState(call, Approval.Status.CANCELLED, call.args, reason, None, run.finished_at)
    if decisions.is_halted(run):
        return CallState(call, PENDING, call.args, run.status_detail.removeprefix(HALTED))
    return None


def reported(call: ExternalCall) -> dict | None:
    """What the agent reported the call did (its result or error), or None before it did:
    a client that hands out calls to be fetched later (the MCP proxy's tasks) reads the
    outcome back from here, so nothing of it lives only in the client's memory."""
    if call.result_seq is None:
        return None
    data = (
        Step.objects.filter(run_id=call.run_id, seq=call.result_seq)
        .values_list("data", flat=True)
        .first()
    ) or {}
    if data.get("is_error"):
        return {"is_error": True, "error": data.get("error", "")}
    return {"is_error": False, "result": data.get("result")}


def report_result(
    call: ExternalCall,
    *,
    result: Any = None,
    error: str | None = None,
    duration_ms: int = 0,
    cost_usd: Decimal | None = None,
) -> Step:
    """The agent says what the call did: the run's tool step. Only a call it was allowed to
    make, with the arguments it was allowed; once."""
    _capped("result", result)
    _capped("error", error)
    if cost_usd is not None:
        try:
            # As the step's column keeps it (6 places), so the hash covers what is stored.
            cost_usd = call_cost(cost_usd)
        except ValueError:
            raise SessionError(
                422, f"cost_usd must be a number of dollars, 0 to {MAX_CALL_COST_USD}"
            ) from None
    state = state_of(call)
    if not state.approved:
        raise SessionError(409, f"this call was {state.status}: it must not have run")
    with transaction.atomic():
        run = _locked_open(call.run_id)
        fresh = ExternalCall.objects.select_for_update().get(pk=call.pk)
        if fresh.withdrawn_at is not None:
            raise SessionError(409, "this call was withdrawn: it must not have run")
        if fresh.result_seq is not None:
            raise SessionError(
                409, f"the result of this call was already reported (step #{fresh.result_seq})"
            )
        is_error = error is not None
        data = {
            "tool_use_id": f"{EXTERNAL_USE_PREFIX}{call.pk}",
            "tool": call.tool,
            "args": state.args,
            "is_error": is_error,
            "attempts": 1,
            "duration_ms": max(0, int(duration_ms or 0)),
            "idempotency_key": "",
        }
        if call.approval_id:
            data["approval"] = str(call.approval_id)
        if is_error:
            data["error"] = str(error)
        else:
            data["result"] = result
        # Consecutive errors and cost count toward the session's limits (limit_reached).
        update: dict[str, Any] = {"consecutive_errors": 0}
        if is_error:
            update = {
                "tool_failed_count": run.tool_failed_count + 1,
                "error_count": run.error_count + 1,
                "consecutive_errors": run.consecutive_errors + 1,
            }
        if cost_usd:
            data["cost_usd"] = str(cost_usd)
            update["cost_usd"] = run.cost_usd + cost_usd
        # On the step's cost column too: the agent's spend and its budget read it there.
        step = run.append_step(
            Step.Kind.TOOL,
            data,
            update=update,
            latency_ms=data["duration_ms"],
            cost_usd=cost_usd or 0,
        )
        ExternalCall.objects.filter(pk=call.pk).update(result_seq=step.seq)
    return step


def withdraw(call: ExternalCall, *, reason: str = "") -> ExternalCall:
    """The agent gave the call up (its framework abandoned it: a timeout, a cancellation):
    it must never run. A pending approval is withdrawn (cancelled, "withdrawn by the
    agent"), so nobody decides it for nothing; an approved one is kept as decided, and the
    timeline says the call did not run. Once; not after a result was reported."""
    if len(reason) > SUMMARY_MAX:
        raise SessionError(413, f"reason is {len(reason)} characters; the limit is {SUMMARY_MAX}")
    with transaction.atomic():
        run = Run.locked(call.run_id)
        fresh = ExternalCall.objects.select_for_update().get(pk=call.pk)
        if fresh.withdrawn_at is not None:
            return fresh
        if fresh.result_seq is not None:
            raise SessionError(409, f"this call ran: its result is step #{fresh.result_seq}")
        now = timezone.now()
        why = "withdrawn by the agent" + (f": {reason}" if reason else "")
        was = None
        if fresh.approval_id is not None:
            was = Approval.objects.filter(pk=fresh.approval_id).values_list("status", flat=True)[0]
            if was == Approval.Status.PENDING:
                Approval.objects.filter(
                    pk=fresh.approval_id, status=Approval.Status.PENDING
                ).update(status=Approval.Status.CANCELLED, reason=why, decided_at=now)
                events.publish_approvals_changed(fresh.approval_id)
                wait_traces.record_withdrawn_on_commit(
                    [fresh.approval_id], run, by="", at=now, cause=why
                )
        ExternalCall.objects.filter(pk=fresh.pk).update(withdrawn_at=now)
        fresh.withdrawn_at = now
        step = {
            "event": "withdrawn",
            "call": str(fresh.pk),
            "tool": fresh.tool,
            "approval": str(fresh.approval_id) if fresh.approval_id else None,
            "approval_was": was,
            "detail": why + "; the call did not run",
        }
        if run.is_terminal:
            pass  # nothing more to write on a finished session's timeline
        elif run.status != Run.Status.WAITING or engine_gates.pending_count(run):
            run.append_step(Step.Kind.STATUS, step)
        else:
            run.resume("no decision awaited", first=(Step.Kind.STATUS, step, {}))
        wakeups.publish_decided_on_commit(fresh.pk, run.pk)
    return fresh


def close(run: Run, *, succeeded: bool, output: str = "", detail: str = "") -> Run:
    """End the session: succeeded (completed) or failed. What still waits for a person is
    cancelled with it."""
    _capped("output", output)
    with transaction.atomic():
        run = _locked_open(run.pk)
        if succeeded and run.status == Run.Status.WAITING:
            raise SessionError(409, "calls of this session still wait for a decision")
        if succeeded:
            status, reason = Run.Status.SUCCEEDED, Run.Termination.COMPLETED
            detail = detail or "closed by the agent"
        else:
            status, reason = Run.Status.FAILED, Run.Termination.AGENT_FAILED
            detail = detail or "failed, says the agent"
        _end(run, status, reason, detail, output=output)
    return run


def _end(
    run: Run, status: str, reason: str, detail: str, *, output: str = "", call_reason: str = ""
) -> list:
    """The session's end and its terminated step; approvals still pending are cancelled
    (with `call_reason`, what their agent is told, when given): their ids. Under the run's
    row lock."""
    pending = list(
        Approval.objects.filter(run=run, status=Approval.Status.PENDING).values_list(
            "pk", flat=True
        )
    )
    now = timezone.now()
    Approval.objects.filter(pk__in=pending, status=Approval.Status.PENDING).update(
        status=Approval.Status.CANCELLED,
        decided_at=now,
        **({"reason": call_reason} if call_reason else {}),
    )
    for approval_id in pending:
        events.publish_approvals_changed(approval_id)
    wait_traces.record_withdrawn_on_commit(
        pending, run, by="", at=now, cause=f"session ended: {detail}"
    )
    wakeups.publish_cancelled_on_commit(pending, run.pk)
    wakeups.publish_session_ended_on_commit(run.pk)
    if not run.terminate(status, reason, detail, output=output):
        raise SessionError(409, f"the session is already {run.status}")
    return pending


# --- sessions nobody uses any more ------------------------------------------------------------
def deactivated_reason(slug: str) -> str:
    """What the agent, the approvers and the timeline are told of a deactivated agent's calls."""
    return f"the external agent {slug!r} was deactivated: its calls are not decided or run"


def end_sessions_of_inactive(slug: str | None = None) -> list[list]:
    """End the open sessions of deactivated agents (of `slug` only, when given): cancelled,
    their pending calls cancelled with the reason, which the waiting agent is told (its
    waiters woken; gateway/tasks.py sends the callbacks) and approvers see (a decision is a
    409). Returns, per session ended, the ids of the approvals cancelled with it."""
    inactive = ExternalAgent.objects.filter(active=False)
    if slug is not None:
        inactive = inactive.filter(slug=slug)
    open_ = Run.objects.filter(
        trigger=Run.Trigger.EXTERNAL,
        status__in=Run.ACTIVE_STATUSES,
        agent__in=inactive.values("slug"),
    )
    ended = []
    for run_id, agent in open_.values_list("pk", "agent"):
        why = deactivated_reason(agent)
        cancelled = _end_if_open(run_id, Run.Status.CANCELLED, Run.Termination.CANCELLED, why, why)
        if cancelled is not None:
            ended.append(cancelled)
    return ended


def idle_seconds() -> float:
    """AGENTOPS_EXTERNAL_SESSION_IDLE_SECONDS: a session `running` (not waiting for a person)
    with no call, result or other step for this long is abandoned; 0 keeps sessions open
    until their max_seconds."""
    return float(settings.AGENTOPS["EXTERNAL_SESSION_IDLE_SECONDS"])


def end_idle(now=None) -> int:
    """End (failed, idle) the sessions `running` with no step for `idle_seconds()`: opened and
    never used, or left by an agent that went away. A session waiting for a person is not
    idle: its agent waits for the decision. Returns how many ended."""
    seconds = idle_seconds()
    if seconds <= 0:
        return 0
    cutoff = (now or timezone.now()) - timedelta(seconds=seconds)
    idle = Run.objects.filter(
        trigger=Run.Trigger.EXTERNAL, status=Run.Status.RUNNING, created_at__lt=cutoff
    ).exclude(Exists(Step.objects.filter(run=OuterRef("pk"), created_at__gte=cutoff)))
    ended = 0
    for run_id in idle.values_list("pk", flat=True):
        detail = f"no call or result for {seconds:.0f}s (AGENTOPS_EXTERNAL_SESSION_IDLE_SECONDS)"
        if _end_if_open(run_id, Run.Status.FAILED, Run.Termination.IDLE, detail, "") is not None:
            ended += 1
    return ended


def _end_if_open(run_id, status: str, reason: str, detail: str, call_reason: str) -> list | None:
    """The approvals cancelled with the session; None when it had ended meanwhile (closed by
    its agent, cancelled by an operator)."""
    with transaction.atomic():
        run = Run.locked(run_id)
        if run.is_terminal:
            return None
        return _end(run, status, reason, detail, call_reason=call_reason)


def deactivated_hold(approval: Approval, run: Run) -> str:
    """decisions.APPROVAL_HOLDS: an external call whose agent is deactivated is not approved
    (its session may not have ended yet, if the agent was switched off without a save)."""
    if run.trigger != Run.Trigger.EXTERNAL:
        return ""
    if ExternalAgent.objects.filter(slug=run.agent, active=True).exists():
        return ""
    return deactivated_reason(run.agent)


def _locked_open(run_id) -> Run:
    run = Run.locked(run_id)
    if run.is_terminal:
        raise SessionError(409, f"the session is {run.status}: it takes no more calls")
    return run
