"""The forms of the regression pages; each checks its input, so bad input is a form error."""

from django import forms

from accounts import teams
from agentkit.agents import CATALOGUE

from .cases import DecisionFilter
from .models import Case, Dataset
from .rehearsal import PROVIDERS


def launchable_agents(user) -> list[tuple[str, str]]:
    scope = teams.scope(user, teams.Power.LAUNCH)
    return [(slug, slug) for slug in sorted(CATALOGUE) if scope.allows(slug)]


class DatasetForm(forms.ModelForm):
    class Meta:
        model = Dataset
        fields = ["name", "agent", "description"]
        widgets = {"description": forms.Textarea(attrs={"rows": 2})}

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["agent"] = forms.ChoiceField(choices=launchable_agents(user))


class DecisionFilterForm(forms.Form):
    verdict = forms.ChoiceField(
        choices=[("", "every decision"), *Case.Verdict.choices], required=False
    )
    tool = forms.CharField(max_length=64, required=False)
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    run = forms.UUIDField(required=False, label="Run id", help_text="only this run's decisions")

    def clean(self):
        data = super().clean()
        if data.get("since") and data.get("until") and data["since"] > data["until"]:
            raise forms.ValidationError("'since' is after 'until'")
        return data

    def decision_filter(self) -> DecisionFilter:
        return DecisionFilter(**self.cleaned_data)


class RegressionForm(forms.Form):
    agent = forms.ChoiceField(help_text="The agent version replayed: its current definition.")
    provider = forms.ChoiceField(choices=[(p, p) for p in PROVIDERS])

    def __init__(self, *args, user, dataset: Dataset, provider: str, **kwargs):
        kwargs.setdefault("initial", {"agent": dataset.agent, "provider": provider})
        super().__init__(*args, **kwargs)
        self.fields["agent"].choices = launchable_agents(user)


class AddApprovalForm(forms.Form):
    dataset = forms.ModelChoiceField(queryset=Dataset.objects.none())

    def __init__(self, *args, datasets, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["dataset"].queryset = datasets
