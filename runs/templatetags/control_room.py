"""Template tags shared by the control room's pages."""

from django import template

from approvals.models import Approval

register = template.Library()


@register.simple_tag
def pending_approvals_count() -> int:
    """The navigation's pending count at page load; pushes keep it current afterwards."""
    return Approval.objects.pending().count()
