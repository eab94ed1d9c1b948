"""The form a budget is edited with (the Budgets page; the API checks the same rules through
`budget_errors`). Admins set any budget, an agent's or a team's; a member who administers a
team sets that team's budgets only (runs/budgets/models.py `may_edit`)."""

from decimal import Decimal
from zoneinfo import available_timezones

from django import forms

from accounts.models import Team

from ..forms import agent_choices
from ..models import Budget
from . import models as budgets


def time_zone_choices() -> list[tuple[str, str]]:
    return [(name, name) for name in sorted(available_timezones())]


class BudgetForm(forms.ModelForm):
    agent = forms.ChoiceField(required=False, help_text="An agent's budget: its own spend.")
    team = forms.ModelChoiceField(
        queryset=Team.objects.none(),
        required=False,
        to_field_name="slug",
        help_text="A team's budget: the spend of all the agents it owns, summed.",
    )
    time_zone = forms.ChoiceField(choices=time_zone_choices, initial="UTC")
    amount_usd = forms.DecimalField(
        min_value=Decimal("0.01"), max_digits=12, decimal_places=2, label="Amount (USD)"
    )
    warn_percent = forms.IntegerField(min_value=1, max_value=1000, initial=80, label="Warn at %")
    approve_percent = forms.IntegerField(
        min_value=1, max_value=1000, initial=100, label="Ask approval at %"
    )
    stop_percent = forms.IntegerField(min_value=1, max_value=1000, initial=120, label="Stop at %")

    class Meta:
        model = Budget
        fields = [
            "agent",
            "team",
            "period",
            "time_zone",
            "amount_usd",
            "warn_percent",
            "approve_percent",
            "stop_percent",
        ]

    def __init__(self, *args, user, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.user = user
        if self.instance.team_id:
            # The choices are slugs (the API names teams so); the instance's initial is its key.
            self.initial["team"] = self.instance.team.slug
        if user.is_admin:
            self.fields["agent"].choices = [("", "— (a team's budget)"), *agent_choices()]
            self.fields["team"].queryset = Team.objects.order_by("name")
            self.fields["team"].empty_label = "— (an agent's budget)"
        else:
            # A team's administrator sets the budgets of their teams, not agents'.
            del self.fields["agent"]
            self.fields["team"].queryset = Team.objects.filter(
                pk__in=budgets.administered_teams(user)
            ).order_by("name")
            self.fields["team"].required = True

    def clean(self) -> dict:
        data = super().clean()
        if "agent" not in self.fields and self.data.get("agent"):
            raise forms.ValidationError("Only admins set an agent's budget; name your team.")
        agent, team = data.get("agent") or "", data.get("team")
        named = "agent" in self.fields and not ({"agent", "team"} & set(self.errors))
        if named and bool(agent) == bool(team):
            raise forms.ValidationError("Name an agent or a team (a budget is one or the other).")
        return data

    def _post_clean(self) -> None:
        if "agent" not in self.fields:
            self.instance.agent = ""
        super()._post_clean()


def budget_errors(
    data: dict, instance: Budget | None = None, *, user
) -> tuple[Budget | None, dict]:
    """The form's rules for the API: (the unsaved budget, {}) or (None, field errors)."""
    form = BudgetForm(
        {k: v for k, v in data.items() if v is not None}, instance=instance, user=user
    )
    if not form.is_valid():
        return None, {f: [str(m) for m in ms] for f, ms in form.errors.items()}
    return form.save(commit=False), {}
