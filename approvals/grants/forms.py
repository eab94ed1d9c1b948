"""The card's "allow more than this call" form, and what the card shows about grants
(approvals/grants/models.py has the rules)."""

from datetime import timedelta

from django import forms
from django.utils import timezone

from ..models import Approval, Grant
from . import models as grants

RUN, ENVELOPE, COUNT = "run", "envelope", "count"
DURATIONS = [(15, "15 minutes"), (60, "1 hour"), (240, "4 hours"), (1440, "1 day")]


class GrantForm(forms.Form):
    """The card's three ways to allow more than this call."""

    kind = forms.ChoiceField(
        choices=[
            (RUN, "Allow this tool for the rest of this run"),
            (ENVELOPE, "Allow it for this agent while an argument stays within a bound"),
            (COUNT, "Allow it for this agent for the next N calls"),
        ],
        widget=forms.RadioSelect,
        initial=RUN,
    )
    arg = forms.ChoiceField(required=False, label="Argument")
    bound = forms.DecimalField(required=False, label="At most", max_digits=20, decimal_places=6)
    minutes = forms.TypedChoiceField(
        choices=DURATIONS, coerce=int, initial=60, required=False, label="For"
    )
    uses = forms.IntegerField(
        required=False, min_value=1, max_value=grants.MAX_USES, initial=10, label="Calls"
    )
    note = forms.CharField(required=False, max_length=500, label="Note (kept with the grant)")

    def __init__(self, *args, approval: Approval, **kwargs):
        super().__init__(*args, **kwargs)
        self.numeric = grants.numeric_args(approval)
        self.fields["arg"].choices = [(name, name) for name, _ in self.numeric]
        if self.numeric and not self.is_bound:
            self.initial["arg"], self.initial["bound"] = self.numeric[0]

    def clean(self):
        data = super().clean()
        kind = data.get("kind")
        if kind == ENVELOPE:
            if not self.numeric:
                self.add_error("kind", "this call has no numeric argument to bound")
            if not data.get("arg"):
                self.add_error("arg", "choose the argument to bound")
            if data.get("bound") is None:
                self.add_error("bound", "give the largest value allowed")
            if not data.get("minutes"):
                self.add_error("minutes", "choose how long it lasts")
        if kind == COUNT and not data.get("uses"):
            self.add_error("uses", "give the number of calls")
        return data

    def bounds(self) -> grants.Bounds:
        data = self.cleaned_data
        note = data.get("note", "")
        if data["kind"] == RUN:
            return grants.Bounds(scope=Grant.Scope.RUN, envelope=[], note=note)
        if data["kind"] == ENVELOPE:
            return grants.Bounds(
                scope=Grant.Scope.AGENT,
                envelope=grants.envelope_for(data["arg"], data["bound"]),
                expires_at=timezone.now() + timedelta(minutes=data["minutes"]),
                note=note,
            )
        return grants.Bounds(scope=Grant.Scope.AGENT, envelope=[], max_uses=data["uses"], note=note)


def card_context(approval: Approval, user, form: GrantForm | None = None) -> dict:
    """What the card shows about grants: the active ones that apply, and the form (or why
    there is none)."""
    context: dict = {
        "applying_grants": [(g, grants.describe(g)) for g in grants.applying_to(approval)]
        if approval.tool
        else []
    }
    if approval.kind != Approval.Kind.ACTION:
        return context
    refusal = grants.refusal(approval, grants.pii_findings(approval))
    may = (
        user.can_approve
        and approval.status == Approval.Status.PENDING
        and not approval.run.is_terminal
        and not refusal
    )
    context["grant_refusal"] = refusal
    context["grant_form"] = (form or GrantForm(approval=approval)) if may else None
    return context
