"""The learning gate policy's pieces on other apps' pages (the dashboard's incidents card)."""

from django import template

from ..learning import review

register = template.Library()


@register.inclusion_tag("approvals/incidents.html")
def policy_incidents() -> dict:
    """ "Should have been gated" verdicts of the last week; nothing is shown without any."""
    return {"incidents": list(review.incidents()[:10])}
