"""Budgets: what an agent has spent in its budget's current period, and what that allows.

A period is a day, a week (Monday to Sunday) or a month of the calendar in the budget's time
zone: it starts at local midnight, whatever the offset that day (DST changes make a day 23 or
25 hours long, and a month's bounds move with them). The spend is the sum of the cost of the
agent's steps recorded in the period (model calls and tools), read the cheap way:

- whole UTC days come from AgentDaySpend (a few rows per agent and day, kept by a trigger);
- a period that does not start at UTC midnight (a time zone other than UTC) starts with a
  part of a UTC day, summed from the steps themselves (a created_at range: the BRIN index of
  runs/migrations/0019 on Postgres); once that part is over it can no longer change, so its
  sum is kept in the cache for the rest of the period.

Crossing a threshold is recorded once per budget, threshold and period (BudgetCrossing).
"""

import time as monotonic
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo, available_timezones

from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.utils import timezone

from accounts import teams

from .models import AgentDaySpend, Budget, BudgetCrossing, Run, Step

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


def spent(agent: str, start: datetime, now: datetime) -> Decimal:
    """What the agent's steps recorded from `start` to `now` cost, in USD."""
    first_midnight = datetime.combine(start.date(), time.min, UTC)
    if first_midnight < start:
        first_midnight += timedelta(days=1)
    total = Decimal(0)
    edge_end = min(first_midnight, now)
    if start < edge_end:
        total += _steps_cost(agent, start, edge_end, settled=edge_end <= now - SETTLED_AFTER)
    if first_midnight <= now:
        days = AgentDaySpend.objects.filter(
            agent=agent, day__gte=first_midnight.date(), day__lte=now.date()
        ).aggregate(cost=Sum("cost_usd"))
        total += Decimal(days["cost"] or 0)
    return total.quantize(USD)


def _steps_cost(agent: str, start: datetime, end: datetime, *, settled: bool) -> Decimal:
    key = f"budget-steps:{agent}:{start.isoformat()}:{end.isoformat()}"
    if settled:
        cached = cache.get(key)
        if cached is not None:
            return Decimal(cached)
    cost = Step.objects.filter(
        created_at__gte=start, created_at__lt=end, cost_usd__gt=0, run__agent=agent
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
        return (
            f"{b.agent} has spent {self.spent_usd:.2f} of its {b.amount_usd} USD {b.periodic} "
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


def state_of(budget: Budget, now: datetime | None = None) -> BudgetState:
    now = now or timezone.now()
    start, end = period_bounds(budget.period, budget.time_zone, now)
    return BudgetState(budget, start, end, spent(budget.agent, start, now))


def states(now: datetime | None = None, viewer=None) -> list[BudgetState]:
    """Every budget with its current period's spend (the dashboard's gauges); with `viewer`,
    only those of the agents that user's teams let them see."""
    found = Budget.objects.all()
    if viewer is not None:
        found = found.filter(teams.scope(viewer, teams.Power.VIEW).q("agent"))
    return [state_of(b, now) for b in found]


def most_severe(agent: str, now: datetime | None = None) -> list[BudgetState]:
    """The agent's budgets past a threshold, most severe first (none: it may go on)."""
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
    found = list(Budget.objects.filter(agent=agent))
    _by_agent[agent] = (now, found)
    return found


@receiver(post_save, sender=Budget)
@receiver(post_delete, sender=Budget)
def _forget(sender, **kwargs) -> None:
    _by_agent.clear()


def time_zones() -> list[str]:
    return sorted(available_timezones())
