"""The form an admin edits a budget with (the Budgets page; the API checks the same rules
through `budget_errors`)."""

from decimal import Decimal
from zoneinfo import available_timezones

from django import forms

from .forms import agent_choices
from .models import Budget


def time_zone_choices() -> list[tuple[str, str]]:
    return [(name, name) for name in sorted(available_timezones())]


class BudgetForm(forms.ModelForm):
    agent = forms.ChoiceField(choices=agent_choices)
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
            "period",
            "time_zone",
            "amount_usd",
            "warn_percent",
            "approve_percent",
            "stop_percent",
        ]


def budget_errors(data: dict, instance: Budget | None = None) -> tuple[Budget | None, dict]:
    """The form's rules for the API: (the unsaved budget, {}) or (None, field errors)."""
    form = BudgetForm({k: v for k, v in data.items() if v is not None}, instance=instance)
    if not form.is_valid():
        return None, {f: [str(m) for m in ms] for f, ms in form.errors.items()}
    return form.save(commit=False), {}
