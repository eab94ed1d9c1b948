"""Forms of the runs pages: the launch form's fixed part and the runs list filters."""

from datetime import date

from django import forms

from accounts import teams
from agentkit.agents import CATALOGUE, Agent

from .models import Run

LIMIT_FIELDS = ("max_steps", "max_cost_usd", "max_seconds", "max_consecutive_errors")


def agent_choices() -> list[tuple[str, str]]:
    return [(slug, agent.title) for slug, agent in sorted(CATALOGUE.items())]


def launchable_agents(user) -> dict[str, Agent]:
    """The catalogue's agents `user` may launch (role and teams: accounts/teams.py)."""
    agents = teams.scope(user, teams.Power.LAUNCH)
    return {slug: agent for slug, agent in sorted(CATALOGUE.items()) if agents.allows(slug)}


class LaunchForm(forms.Form):
    """Agent and optional limit overrides; the agent's own input form is rendered beside it.

    Bounds are the agent's `max_limits`, checked by `Agent.resolve_limits` (the API uses the
    same rule), so this form only parses.
    """

    agent = forms.ChoiceField(choices=agent_choices)
    limit_max_steps = forms.IntegerField(required=False, min_value=1, label="Max steps")
    limit_max_cost_usd = forms.DecimalField(
        required=False, min_value=0, max_digits=10, decimal_places=4, label="Max cost (USD)"
    )
    limit_max_seconds = forms.IntegerField(required=False, min_value=1, label="Max seconds")
    limit_max_consecutive_errors = forms.IntegerField(
        required=False, min_value=1, label="Max consecutive errors"
    )

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        if user is not None:
            # An agent the user's teams do not launch is not offered, and is refused if sent.
            self.fields["agent"].choices = [
                (slug, agent.title) for slug, agent in launchable_agents(user).items()
            ]

    def limit_overrides(self) -> dict:
        return {
            name: self.cleaned_data.get(f"limit_{name}")
            for name in LIMIT_FIELDS
            if self.cleaned_data.get(f"limit_{name}") is not None
        }


class RunFilterForm(forms.Form):
    status = forms.ChoiceField(choices=[("", "any status"), *Run.Status.choices], required=False)
    agent = forms.ChoiceField(required=False)
    trigger = forms.ChoiceField(choices=[("", "any trigger"), *Run.Trigger.choices], required=False)
    launched_by = forms.CharField(required=False, max_length=150, label="Launched by")
    date_from = forms.DateField(
        required=False, label="From", widget=forms.DateInput(attrs={"type": "date"})
    )
    date_to = forms.DateField(
        required=False, label="To", widget=forms.DateInput(attrs={"type": "date"})
    )
    q = forms.CharField(required=False, max_length=200, label="Text in input or output")
    outcome = forms.ChoiceField(
        required=False,
        label="Outcome",
        choices=[
            ("", "any outcome"),
            ("approved", "approved"),
            ("edited", "edited"),
            ("rejected", "rejected"),
            ("answered", "answered"),
            ("expired", "expired"),
            ("tool_failed", "tool failed"),
        ],
    )
    decided_by = forms.CharField(required=False, max_length=150, label="Decided by")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["agent"].choices = [("", "any agent"), *agent_choices()]

    def clean_date_to(self):
        # The filter ends at the start of the next day, which 9999-12-31 does not have.
        value = self.cleaned_data["date_to"]
        if value is not None and value >= date.max:
            raise forms.ValidationError(f"Enter a date before {date.max:%Y-%m-%d}.")
        return value


class InstructionForm(forms.Form):
    """An instruction for a run's agent; `key` is made when the form is shown, so a form sent
    twice (a double click, a retried request) adds the instruction once."""

    text = forms.CharField(max_length=4000, strip=True, widget=forms.Textarea(attrs={"rows": 2}))
    key = forms.CharField(max_length=100, widget=forms.HiddenInput)


class RecoveryForm(forms.Form):
    """An operator's choice for a failed step: retry (arguments as JSON, edited or not),
    skip (a note for the agent) or instruct (an instruction for the agent)."""

    choice = forms.ChoiceField(
        choices=[("retry", "retry"), ("skip", "skip"), ("instruct", "instruct")]
    )
    arguments = forms.JSONField(required=False, widget=forms.Textarea(attrs={"rows": 4}))
    note = forms.CharField(max_length=4000, required=False, strip=True)
    text = forms.CharField(max_length=4000, required=False, strip=True)

    def clean(self):
        data = super().clean()
        args = data.get("arguments")
        if data.get("choice") == "retry" and args is not None and not isinstance(args, dict):
            self.add_error("arguments", "The arguments must be a JSON object.")
        if data.get("choice") == "instruct" and not data.get("text"):
            self.add_error("text", "Say what the agent should do instead.")
        return data
