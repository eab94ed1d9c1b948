"""Who may take out the oversight records (the decisions export, approver statistics), and of
which agents: the one rule behind their pages and API endpoints.

Admins reach every agent and may narrow to any team. A team member with the team's
`administer` power (accounts/teams.py) reaches the agents of the teams they administer, and may
narrow to one of those teams; nobody else reaches these records at all.
"""

from django.core.exceptions import PermissionDenied

from accounts import teams
from accounts.teams import Power

POWER = Power.ADMINISTER


class OutOfReach(ValueError):
    """A team or agent filter the user may not use; its message says why (a 400 / form error)."""


def may_oversee(user) -> bool:
    return bool(getattr(user, "is_admin", False)) or teams.team_choices(user, POWER).exists()


def agents_for(user, *, team: str = "", agent: str = "") -> list[str] | None:
    """The agents whose records `user` may see, narrowed to `team` (a slug, "" for all their
    teams): None means every agent (an admin, no team). PermissionDenied for someone with no
    reach; OutOfReach for a team not theirs, or an `agent` outside what they reach."""
    if not may_oversee(user):
        raise PermissionDenied
    try:
        reach = teams.narrowed(user, POWER, team)
    except teams.NoSuchTeam as exc:
        raise OutOfReach(str(exc)) from None
    agents = reach.listed()
    if agent and agents is not None and agent not in agents:
        where = f"team {team.strip()!r}" if team.strip() else "your teams"
        raise OutOfReach(f"agent {agent[:64]!r} is not one of the agents of {where}")
    return agents


def team_slugs(user) -> list[str]:
    """The teams the user may narrow to, for the pages' team field."""
    return list(teams.team_choices(user, POWER).order_by("slug").values_list("slug", flat=True))


def agent_choices(user, catalogue: list[str]) -> list[str]:
    """The agents a page offers: the catalogue for an admin, the reached ones otherwise."""
    agents = teams.scope(user, POWER).listed()
    return catalogue if agents is None else agents
