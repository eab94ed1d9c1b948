"""What other apps' pages show of approvals: the navigation's count, the dashboard's list and
chart, a run's decisions. Runs' templates load these, so runs' views never query approvals."""

from django import template
from django.db.models import QuerySet

from runs import charts
from runs.models import Run

from .. import listing, stats
from ..models import Approval

register = template.Library()

PANELS = "approvals/panels.html"


@register.simple_tag
def pending_approvals_count() -> int:
    """The navigation's pending count at page load; pushes keep it current afterwards."""
    return Approval.objects.pending().count()


@register.inclusion_tag(PANELS + "#dashboard-approval-list")
def dashboard_approval_list() -> dict:
    """The dashboard's pending approvals, riskiest first; the approvals stream replaces the
    list (approvals/live.py) when one opens or is decided."""
    return {"pending": listing.oldest_riskiest(), "oob": False}


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
