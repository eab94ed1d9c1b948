"""Budgets: what an agent (or a team's agents together) has spent in its budget's current
period, and what that allows.
Why and how: docs/design/modules.md."""

import hashlib
import time as monotonic
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo, available_timezones

from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.db.models import Q, Sum
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.utils import timezone

from accounts import teams
from accounts.models import TeamAgent, TeamMember

from ..models import AgentDaySpend, Budget, BudgetCrossing, Run, Step

# The levels a spend reaches, in order; "ok" below the first threshold.
OK, WARN, APPROVE, STOP = "ok", "warn", "approve", "stop"
LEVELS = (OK, WARN, APPROVE, STOP)
USD = Decimal("0.000001")
# A part of a period that ended this long ago has all its steps committed: its sum is cached.
SETTLED_AFTER = timedelta(minutes=10)


def period_bounds(period: str, time_zone: str, now: datetime) -> tuple[datetime, datetime]:
    """The period containing `now`, as UTC instants: [start, end)."""
    tz = ZoneInfo(time_zone)
    today = now.astimezone(tz).date()
    if period == Budget.Period.DAY:
        first, after = today, today + timedelta(days=1)
    elif period == Budget.Period.WEEK:
        first = today - timedelta(days=today.weekday())
        after = first + timedelta(days=7)
    else:
        first = today.replace(day=1)
        after = (first + timedelta(days=32)).replace(day=1)
    return _midnight(first, tz), _midnight(after, tz)


def _midnight(day: date, tz: ZoneInfo) -> datetime:
    # Where midnight does not exist (a DST change at 00:00), zoneinfo reads it with the
    # offset before the change: the day's first instant.
    return datetime.combine(day, time.min, tz).astimezone(UTC)


def spent(agents: str | Iterable[str], start: datetime, now: datetime) -> Decimal:
    """What the steps of the agent (or agents, summed) recorded from `start` to `now` cost."""
    agents = (agents,) if isinstance(agents, str) else tuple(sorted(set(agents)))
    if not agents:
        return Decimal(0).quantize(USD)
    first_midnight = datetime.combine(start.date(), time.min, UTC)
    if first_midnight < start:
        first_midnight += timedelta(days=1)
    total = Decimal(0)
    edge_end = min(first_midnight, now)
    if start < edge_end:
        total += _steps_cost(agents, start, edge_end, settled=edge_end <= now - SETTLED_AFTER)
    if first_midnight <= now:
        days = AgentDaySpend.objects.filter(
            agent__in=agents, day__gte=first_midnight.date(), day__lte=now.date()
        ).aggregate(cost=Sum("cost_usd"))
        total += Decimal(days["cost"] or 0)
    return total.quantize(USD)


def _steps_cost(
    agents: tuple[str, ...], start: datetime, end: datetime, *, settled: bool
) -> Decimal:
    # A team's agents make a long name: the key carries a digest of them.
    who = agents[0] if len(agents) == 1 else hashlib.sha256("\0".join(agents).encode()).hexdigest()
    key = f"budget-steps:{who}:{start.isoformat()}:{end.isoformat()}"
    if settled:
        cached = cache.get(key)
        if cached is not None:
            return Decimal(cached)
    cost = Step.objects.filter(
        created_at__gte=start, created_at__lt=end, cost_usd__gt=0, run__agent__in=agents
    ).aggregate(cost=Sum("cost_usd"))["cost"] or Decimal(0)
    if settled:
        cache.set(key, str(cost), timeout=32 * 86400)
    return Decimal(cost)


@dataclass(frozen=True)
class BudgetState:
    budget: Budget
    start: datetime
    end: datetime
    spent_usd: Decimal
    agents: tuple[str, ...] = ()  # whose spend it sums (a team's: the agents it owns)

    @property
    def percent(self) -> Decimal:
        return (self.spent_usd * 100 / self.budget.amount_usd).quantize(Decimal("0.1"))

    @property
    def level(self) -> str:
        return level_of(self.budget, self.spent_usd)

    @property
    def crossed(self) -> list[str]:
        """The thresholds at or below this spend, lowest first."""
        return list(LEVELS[1 : LEVELS.index(self.level) + 1])

    def limit_of(self, threshold: str) -> Decimal:
        percent = getattr(self.budget, f"{threshold}_percent")
        return (self.budget.amount_usd * percent / 100).quantize(Decimal("0.01"))

    def describe(self) -> str:
        b = self.budget
        who = b.agent
        if b.team is not None:
            who = f"team {b.team.name} ({', '.join(self.agents) or 'no agents'})"
        return (
            f"{who} has spent {self.spent_usd:.2f} of its {b.amount_usd} USD {b.periodic} "
            f"budget ({self.percent}%, period from {self.local_start:%Y-%m-%d %H:%M} "
            f"{b.time_zone})"
        )

    @property
    def local_start(self) -> datetime:
        return self.start.astimezone(ZoneInfo(self.budget.time_zone))

    @property
    def key(self) -> str:
        """Names this budget's period (an approval asked in it, once per run)."""
        return f"budget:{self.budget.pk}:{self.start:%Y%m%dT%H%M}"


def level_of(budget: Budget, spend: Decimal) -> str:
    percent = spend * 100 / budget.amount_usd
    if percent >= budget.stop_percent:
        return STOP
    if percent >= budget.approve_percent:
        return APPROVE
    if percent >= budget.warn_percent:
        return WARN
    return OK


def agents_of(budget: Budget) -> tuple[str, ...]:
    """Whose spend the budget sums: its agent, or the agents its team owns now (read from a
    `prefetch_related("team__agents")` when the caller made one)."""
    if budget.team is None:
        return (budget.agent,)
    return tuple(sorted({a.agent for a in budget.team.agents.all()}))


def state_of(budget: Budget, now: datetime | None = None) -> BudgetState:
    now = now or timezone.now()
    start, end = period_bounds(budget.period, budget.time_zone, now)
    agents = agents_of(budget)
    return BudgetState(budget, start, end, spent(agents, start, now), agents)


def with_teams(budgets):
    """Budgets with what `state_of` reads of their team, in two queries for them all."""
    return budgets.select_related("team").prefetch_related("team__agents")


def visible_to(viewer):
    """The budgets `viewer` sees: an agent's where their teams let them see the agent; a
    team's where they are an admin, or a member of the team with a role."""
    agents = teams.scope(viewer, teams.Power.VIEW)
    if agents.nothing:
        return Budget.objects.none()
    if agents.everything:
        return Budget.objects.all()
    mine = Q(team__isnull=True) & agents.q("agent")
    member_of = TeamMember.objects.filter(user_id=viewer.pk).values("team_id")
    return Budget.objects.filter(mine | Q(team__in=member_of))


def may_edit(user, budget: Budget) -> bool:
    """Admins edit every budget; a team's budget also its members who administer the team."""
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return False
    if user.is_admin:
        return True
    return bool(budget.team_id) and budget.team_id in administered_teams(user)


def administered_teams(user) -> set[int]:
    """The teams whose budgets `user` may set besides admins: those they administer in."""
    if not getattr(user, "is_authenticated", False) or not user.is_active or not user.can_view:
        return set()
    return set(
        TeamMember.objects.filter(user_id=user.pk, administer=True).values_list(
            "team_id", flat=True
        )
    )


def states(now: datetime | None = None, viewer=None) -> list[BudgetState]:
    """Every budget with its current period's spend (the dashboard's gauges); with `viewer`,
    only those that user sees (`visible_to`)."""
    found = Budget.objects.all() if viewer is None else visible_to(viewer)
    return [state_of(b, now) for b in with_teams(found)]


def most_severe(agent: str, now: datetime | None = None) -> list[BudgetState]:
    """The budgets a run of the agent answers to (its own, its teams') past a threshold, most
    severe first (none: it may go on)."""
    found = [state_of(b, now) for b in budgets_of(agent)]
    found = [s for s in found if s.level != OK]
    return sorted(found, key=lambda s: -LEVELS.index(s.level))


def launch_refusal(agent: str) -> str:
    """Why a new run of the agent may not start (a budget past its stop threshold), or ""."""
    for state in most_severe(agent):
        if state.level == STOP:
            return (
                f"budget exceeded: {state.describe()}; new runs are refused past "
                f"{state.budget.stop_percent}% until the period ends or an admin raises it"
            )
    return ""


def record_crossing(state: BudgetState, threshold: str, run: Run) -> BudgetCrossing | None:
    """The crossing of `threshold` in this period, if this call is the first to see it."""
    try:
        with transaction.atomic():
            return BudgetCrossing.objects.create(
                budget=state.budget,
                period_start=state.start,
                threshold=threshold,
                spent_usd=state.spent_usd,
                run=run,
            )
    except IntegrityError:
        return None


# --- which budgets an agent has, for the engine's every step ------------------------------------
# Read at most every CACHE_SECONDS per process: a step boundary must not pay a query for the
# many agents without a budget. An edit here is seen at once (the signals below); in another
# process within CACHE_SECONDS.
CACHE_SECONDS = 2.0
_by_agent: dict[str, tuple[float, list[Budget]]] = {}


def budgets_of(agent: str) -> list[Budget]:
    now = monotonic.monotonic()
    hit = _by_agent.get(agent)
    if hit is not None and now - hit[0] < CACHE_SECONDS:
        return hit[1]
    # Its own budget and those of the teams owning it; the teams' agents come along (the
    # team's spend sums them all).
    mine = Q(agent=agent, team__isnull=True) | Q(team__agents__agent=agent)
    found = list(with_teams(Budget.objects.filter(mine).distinct()).order_by("pk"))
    _by_agent[agent] = (now, found)
    return found


@receiver(post_save, sender=Budget)
@receiver(post_delete, sender=Budget)
@receiver(post_save, sender=TeamAgent)
@receiver(post_delete, sender=TeamAgent)
def _forget(sender, **kwargs) -> None:
    _by_agent.clear()


def time_zones() -> list[str]:
    return sorted(available_timezones())
