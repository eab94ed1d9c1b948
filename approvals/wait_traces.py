"""An approval's wait as a span of its run's trace (agentkit/tracing.py): from the gate to the
decision, with the decision as an attribute. The gate opened in a worker and the decision is
made in a web request (or by the expiry sweep), so no process holds the wait open: it is
recorded once decided, after commit, with the approval's request time as its start. A wait
its run's cancellation withdrew ends the same way, `cancelled`, with the cause.
"""

from collections.abc import Iterable
from datetime import datetime

from django.db import transaction

from agentkit import tracing
from runs.models import Run

from .models import Approval


def record_on_commit(
    approval: Approval, run: Run, *, status: str, by: str, at: datetime, cause: str = ""
) -> None:
    if not tracing.enabled() or not run.traceparent:
        return
    attributes = {
        "agentops.run.id": str(run.pk),
        "agentops.approval.id": str(approval.pk),
        "agentops.approval.kind": approval.kind,
        "agentops.approval.decision": status,
        "agentops.approval.decided_by": by,
        "agentops.approval.risk": approval.risk,
        "agentops.approval.wait_seconds": max(0.0, (at - approval.requested_at).total_seconds()),
    }
    if approval.tool:
        attributes["gen_ai.tool.name"] = approval.tool
    if cause:
        attributes["agentops.approval.ended_because"] = cause
    transaction.on_commit(
        lambda: tracing.record(
            f"approval {approval.kind}",
            run.traceparent,
            start=approval.requested_at,
            end=at,
            attributes=attributes,
        )
    )


def record_withdrawn_on_commit(
    approval_ids: Iterable, run: Run, *, by: str, at: datetime, cause: str
) -> None:
    """The waits of approvals withdrawn undecided (their run cancelled or ended, the external
    agent withdrew the call), ended `cancelled` with the cause. Reads them only when tracing
    is on."""
    if not tracing.enabled() or not run.traceparent:
        return
    for approval in Approval.objects.filter(pk__in=list(approval_ids)):
        record_on_commit(approval, run, status=Approval.Status.CANCELLED, by=by, at=at, cause=cause)
