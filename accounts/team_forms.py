"""The Teams page's forms: a team (name, agents, where its approvals are announced) and its
members, edited together (a model formset of TeamMember)."""

from django import forms
from django.db import models, transaction

from . import teams
from .models import Team, TeamAgent, TeamMember, User


def _https_by_default(field, **kwargs):
    # A URL typed without its scheme means https (Django 6's default, chosen now).
    if isinstance(field, models.URLField):
        kwargs["assume_scheme"] = "https"
    return field.formfield(**kwargs)


class TeamForm(forms.ModelForm):
    agents = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="An agent owned by no team is reached through the global roles alone.",
    )

    class Meta:
        model = Team
        fields = ["name", "slug", "agents", "webhook_url", "slack_channel"]
        formfield_callback = _https_by_default

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["agents"].choices = [(a, a) for a in teams.known_agents()]
        if self.instance.pk:
            self.initial["agents"] = self.instance.agent_slugs

    def save_agents(self) -> None:
        """After save(): the team owns exactly the chosen agents."""
        team, chosen = self.instance, set(self.cleaned_data["agents"])
        team.agents.exclude(agent__in=chosen).delete()
        held = set(team.agents.values_list("agent", flat=True))
        TeamAgent.objects.bulk_create([TeamAgent(team=team, agent=a) for a in chosen - held])


class MemberForm(forms.ModelForm):
    user = forms.ModelChoiceField(
        queryset=User.objects.filter(is_active=True).order_by("username"),
        to_field_name="username",
    )

    class Meta:
        model = TeamMember
        fields = ["user", "launch", "decide", "administer"]


MemberFormSet = forms.inlineformset_factory(
    Team, TeamMember, form=MemberForm, extra=3, can_delete=True
)


def save_team(form: TeamForm, members) -> Team:
    """Both forms valid: the team, its agents and its members in one transaction."""
    with transaction.atomic():
        team = form.save()
        form.save_agents()
        members.instance = team
        members.save()
    return team
