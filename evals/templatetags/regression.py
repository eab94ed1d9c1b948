"""Template helpers of the regression pages: `{% datasets_for approval as datasets %}` (the
datasets an approval card offers its decided call to, those of the call's agent the user may
build) and `|as_json` (arguments as one line of JSON text, escaped by the template)."""

from typing import Any

from django import template

from accounts import teams
from approvals.models import Approval
from evals.cases import DECIDED
from evals.models import Dataset
from runs.models import canonical_json

register = template.Library()


@register.simple_tag(takes_context=True)
def datasets_for(context, approval: Approval):
    user = context.get("user")
    if approval.kind != Approval.Kind.ACTION or approval.status not in DECIDED:
        return Dataset.objects.none()
    if not approval.decided_by_id or not approval.llm_seq:
        return Dataset.objects.none()
    return Dataset.objects.reachable_by(user, teams.Power.LAUNCH).filter(agent=approval.run.agent)


@register.filter
def as_json(value: Any) -> str:
    return canonical_json(value)
