"""What a page shows a user for one agent (`{% if user|may_launch:run.agent %}`): the same
rule as the views' checks (accounts/teams.py), so a button shows where its request passes."""

from django import template

from accounts import teams

register = template.Library()


@register.filter
def may_launch(user, agent: str) -> bool:
    return teams.may(user, teams.Power.LAUNCH, agent)


@register.filter
def may_decide(user, agent: str) -> bool:
    return teams.may(user, teams.Power.DECIDE, agent)


@register.filter
def may_administer(user, agent: str) -> bool:
    return teams.may(user, teams.Power.ADMINISTER, agent)
