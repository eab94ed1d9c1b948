"""Which agents a user reaches, and for what: the one rule behind every per-agent check.
Why and how: docs/design/modules.md."""

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.db.models import FilteredRelation, Q, TextChoices

from agentkit.agents import CATALOGUE

from .models import Role, Team, TeamAgent, TeamMember

# Apps that know agents the code catalogue does not (gateway/: external agents) add a source
# of their names here at start-up; the Teams page offers them.
AGENT_SOURCES: list[Callable[[], Iterable[str]]] = []


class Power(TextChoices):
    VIEW = "view", "view runs and approvals"
    LAUNCH = "launch", "launch and cancel runs"
    DECIDE = "decide", "decide approvals"
    ADMINISTER = "administer", "administer gate rules"


# The global role each power also needs (a User property); administer needs only a role.
ROLE_FOR = {
    Power.VIEW: "can_view",
    Power.LAUNCH: "can_operate",
    Power.DECIDE: "can_approve",
    Power.ADMINISTER: "can_view",
}


@dataclass(frozen=True)
class AgentScope:
    everything: bool = False
    granted: frozenset[str] = frozenset()  # owned agents a membership grants
    unowned_too: bool = False  # and every agent no team owns
    owned: frozenset[str] = frozenset()

    def allows(self, agent: str) -> bool:
        if self.everything or agent in self.granted:
            return True
        return self.unowned_too and agent not in self.owned

    def q(self, field: str = "agent") -> Q:
        """The queryset condition: `Run.objects.filter(scope.q())`."""
        if self.everything or (self.unowned_too and not self.owned):
            # No team owns anything (a fresh install): no condition, no join.
            return Q()
        condition = Q(**{f"{field}__in": sorted(self.granted)})
        if self.unowned_too:
            condition |= ~Q(**{f"{field}__in": sorted(self.owned)})
        return condition

    @property
    def nothing(self) -> bool:
        return not (self.everything or self.granted or self.unowned_too)

    def listed(self) -> list[str] | None:
        """The agents as a list for an `__in` filter, None for every agent. Only for a scope
        that leaves the unowned agents out (`administer`, or one narrowed to a team)."""
        if self.everything:
            return None
        if self.unowned_too:
            raise ValueError("a scope with the unowned agents has no list: use .q()")
        return sorted(self.granted)


NOTHING = AgentScope()
EVERYTHING = AgentScope(everything=True)


def _teams_of(user) -> tuple[frozenset[str], dict[str, set[str]]]:
    """(agents owned by any team, power -> the owned agents the user's memberships grant it),
    in one query, once per user object: a page asks many times."""
    cache = getattr(user, "_teams_cache", None)
    if cache is None:
        rows = TeamAgent.objects.annotate(
            mine=FilteredRelation("team__members", condition=Q(team__members__user_id=user.pk))
        ).values_list("agent", "mine__id", "mine__launch", "mine__decide", "mine__administer")
        owned: set[str] = set()
        granted: dict[str, set[str]] = {power: set() for power in Power.values}
        for agent, member, launch, decide, administer in rows:
            owned.add(agent)
            if member is None:
                continue
            granted[Power.VIEW].add(agent)
            for power, flag in ((Power.LAUNCH, launch), (Power.DECIDE, decide)):
                if flag:
                    granted[power].add(agent)
            if administer:
                granted[Power.ADMINISTER].add(agent)
        cache = user._teams_cache = (frozenset(owned), granted)
    return cache


def forget(user) -> None:
    """Drop what `scope` read for this user object (after its memberships changed)."""
    if hasattr(user, "_teams_cache"):
        del user._teams_cache


def scope(user, power: str) -> AgentScope:
    """The agents `user` reaches with `power` (see the module's docstring)."""
    power = Power(power)
    # A template rendered for no one (a socket push) passes "" as its user.
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return NOTHING
    if user.is_admin:
        return EVERYTHING
    if not getattr(user, ROLE_FOR[power]):
        return NOTHING
    owned, granted = _teams_of(user)
    return AgentScope(
        granted=frozenset(granted[power]),
        unowned_too=power != Power.ADMINISTER,
        owned=owned,
    )


def may(user, power: str, agent: str) -> bool:
    return scope(user, power).allows(agent)


# --- a page narrowed to one team -----------------------------------------------------------------
class NoSuchTeam(ValueError):
    """A team filter naming no team the user may pick; its message says so (a 400 / form
    error), the same for a team that does not exist and one that is not theirs."""


def team_choices(user, power: str):
    """The teams `user` may narrow a page of `power` to: every team for an admin, else the
    teams whose membership grants them `power` (none without the role it needs)."""
    power = Power(power)
    reach = scope(user, power)
    if reach.everything:
        return Team.objects.all()
    if reach is NOTHING:  # signed out, inactive, or without the role `power` needs
        return Team.objects.none()
    flag = {} if power == Power.VIEW else {f"members__{power.value}": True}
    return Team.objects.filter(members__user=user, **flag).distinct()


def narrowed(user, power: str, team: str) -> AgentScope:
    """`scope(user, power)` narrowed to the agents the team with slug `team` owns ("" narrows
    nothing). NoSuchTeam when `team` is not one of `team_choices(user, power)`."""
    reach = scope(user, power)
    slug = (team or "").strip()
    if not slug:
        return reach
    chosen = team_choices(user, power).filter(slug=slug[:50]).first() if len(slug) <= 50 else None
    if chosen is None:
        shown = repr(slug[:64])
        if reach.everything:
            raise NoSuchTeam(f"no team has the slug {shown}")
        raise NoSuchTeam(f"no team {shown} among the teams where you may {Power(power).label}")
    agents = chosen.agents.values_list("agent", flat=True)
    return AgentScope(granted=frozenset(a for a in agents if reach.allows(a)))


# --- who is told: the same rule, from the agent's side -------------------------------------------
def owned(agent: str) -> bool:
    return TeamAgent.objects.filter(agent=agent).exists()


def members_reaching(users, power: str, agent: str):
    """Of the `users` queryset, those whose teams reach `agent` with `power`: everyone for an
    agent no team owns (their roles decide, as before), else global admins and the members of
    an owning team that grants it. The role each power also needs is the caller's filter."""
    power = Power(power)
    if not owned(agent):
        return users if power != Power.ADMINISTER else users.filter(_ADMINS)
    flag = {} if power == Power.VIEW else {power.value: True}
    members = TeamMember.objects.filter(team__agents__agent=agent, **flag).values("user_id")
    return users.filter(_ADMINS | Q(pk__in=members)).distinct()


_ADMINS = Q(is_superuser=True) | Q(groups__name=Role.ADMIN)


def teams_owning(agent: str):
    return Team.objects.filter(agents__agent=agent).order_by("name")


def known_agents() -> list[str]:
    """Every agent name a team could own: the catalogue's, other apps' (external agents), and
    any a team already names (an agent removed from the code stays removable)."""
    names = set(CATALOGUE) | set(TeamAgent.objects.values_list("agent", flat=True))
    for source in AGENT_SOURCES:
        names |= set(source())
    return sorted(names)
