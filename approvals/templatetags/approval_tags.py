"""What other apps' pages show of approvals: the navigation's count, the dashboard's list and
chart, a run's decisions. Runs' templates load these, so runs' views never query approvals."""

from django import template
from django.db.models import QuerySet

from runs import charts
from runs.models import Run, args_hash

from .. import listing, oversight_reach
from ..learning import stats
from ..models import Approval

register = template.Library()

PANELS = "approvals/panels.html"


@register.simple_tag(takes_context=True)
def pending_approvals_count(context) -> int:
    """The navigation's pending count at page load (of what the user's teams see); pushes
    keep it current afterwards."""
    return Approval.objects.visible_to(context["user"]).pending().count()


@register.inclusion_tag(PANELS + "#dashboard-approval-list", takes_context=True)
def dashboard_approval_list(context) -> dict:
    """The dashboard's pending approvals, riskiest first; the approvals stream replaces the
    list (approvals/stream_messages.py) when one opens or is decided."""
    pending = Approval.objects.visible_to(context["user"]).pending()
    return {"pending": listing.oldest_riskiest(pending), "oob": False}


@register.filter
def may_oversee(user) -> bool:
    """Approver statistics and the decisions export: admins, and teams' administrators."""
    return oversight_reach.may_oversee(user)


@register.simple_tag
def time_to_decision_chart() -> charts.Chart:
    """The dashboard's time-to-decision distribution (drawn by the runs' chart partial)."""
    return stats.time_to_decision_chart()


@register.inclusion_tag(PANELS + "#run-decisions")
def run_decisions(run: Run) -> dict:
    """The audit page's table of a run's approvals and who decided them."""
    decisions: QuerySet[Approval] = (
        Approval.objects.filter(run=run).select_related("decided_by").order_by("requested_at")
    )
    return {"decisions": decisions}


_DECIDED = (
    Approval.Status.APPROVED,
    Approval.Status.REJECTED,
    Approval.Status.ANSWERED,
    Approval.Status.EXPIRED,
)


@register.simple_tag
def decisions_by_run(runs) -> dict[str, list[tuple[str, str]]]:
    """Who decided what in each of these runs (one query for the page): run id ->
    [(decision, who)], decision being approved, edited, rejected, answered or expired."""
    ids = [run.pk for run in runs]
    rows = (
        Approval.objects.filter(run_id__in=ids, status__in=_DECIDED)
        .order_by("decided_at")
        .values_list("run_id", "status", "edited_args", "decided_by__username")
    )
    out: dict[str, list[tuple[str, str]]] = {}
    for run_id, status, edited_args, username in rows:
        decision = "edited" if status == Approval.Status.APPROVED and edited_args else status
        out.setdefault(str(run_id), []).append((decision, username or "the system"))
    return out


@register.filter
def of_run(decisions: dict, run: Run) -> list:
    return decisions.get(str(run.pk), [])


@register.filter
def call_hash(approval: Approval) -> str:
    """The hash of the call a queue row shows: a batch decision sends it back, so only the
    call on screen can be decided (approvals/batch.py)."""
    return args_hash(approval.tool, approval.args or {})
