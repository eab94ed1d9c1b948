"""Spend per agent and per UTC day, from the recorded steps.
Why and how: docs/design/modules.md."""

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

from django.db.models import Sum
from django.utils import timezone

from accounts import teams

from .models import AgentDaySpend

DEFAULT_DAYS = 7
MAX_DAYS = 90
# A step's cost has 6 places; SQLite sums them as floats, Postgres exactly: both are read
# back at the column's precision, so both databases give the same figures.
USD_PLACES = Decimal("0.000001")


@dataclass
class Spend:
    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: Decimal = USD_PLACES * 0  # model calls and tools
    tool_cost_usd: Decimal = USD_PLACES * 0  # the tools' part of it
    # Prompt caching: tokens read from and written to the cache (part of tokens_in), and
    # what it saved against the same calls without a cache.
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cache_saved_usd: Decimal = USD_PLACES * 0

    def add(self, other: "Spend") -> None:
        self.calls += other.calls
        self.tokens_in += other.tokens_in
        self.tokens_out += other.tokens_out
        self.cost_usd += other.cost_usd
        self.tool_cost_usd += other.tool_cost_usd
        self.cache_read_tokens += other.cache_read_tokens
        self.cache_write_tokens += other.cache_write_tokens
        self.cache_saved_usd += other.cache_saved_usd

    @property
    def saved_label(self) -> str:
        """What caching saved as the cost card shows it: "$0.0012", or "-$0.0003" while the
        cache has mostly been written (a write costs 1.25 times an input token)."""
        amount = self.cache_saved_usd.quantize(Decimal("0.0001"))
        return f"-${-amount}" if amount < 0 else f"${amount}"

    @property
    def saved_percent(self) -> int:
        """What caching saved, in percent of what these calls would have cost without it."""
        without = self.cost_usd + self.cache_saved_usd
        return round(self.cache_saved_usd * 100 / without) if without > 0 else 0


@dataclass
class AgentSpend:
    agent: str
    total: Spend = field(default_factory=Spend)
    # Only the days with a model call or a charge, oldest first.
    by_day: dict[date, Spend] = field(default_factory=dict)


@dataclass
class CostReport:
    since: datetime  # midnight UTC of the first day
    days: list[date]  # every day of the window, oldest first (the last one is today, so far)
    agents: list[AgentSpend]  # by slug
    total: Spend

    @property
    def table(self) -> list[tuple[AgentSpend, list[Spend | None]]]:
        """Each agent with one cell per day of the window, None where it made no model call."""
        return [(a, [a.by_day.get(day) for day in self.days]) for a in self.agents]

    @property
    def day_totals(self) -> list[Spend]:
        """Every agent's spend, per day of the window."""
        totals = {day: Spend() for day in self.days}
        for a in self.agents:
            for day, spend in a.by_day.items():
                totals[day].add(spend)
        return list(totals.values())


def window_start(days: int, now: datetime | None = None) -> datetime:
    """Midnight UTC `days - 1` days before today: the window is whole UTC days, today last."""
    today = (now or timezone.now()).astimezone(UTC).date()
    return datetime.combine(today - timedelta(days=days - 1), time.min, UTC)


def cost_by_agent(
    *,
    days: int = DEFAULT_DAYS,
    agent: str | None = None,
    now: datetime | None = None,
    viewer=None,
) -> CostReport:
    """Model calls, tokens and cost (model calls and tools) per agent and per UTC day over
    the last `days` days (today included, so far), from the steps recorded in that time;
    `agent` keeps one, `viewer` the agents that user may see.

    One GROUP BY over the window's rows of AgentDaySpend (its day index serves the filter).
    """
    if not 1 <= days <= MAX_DAYS:
        raise ValueError(f"days must be between 1 and {MAX_DAYS}")
    since = window_start(days, now)
    spent = AgentDaySpend.objects.filter(day__gte=since.date())
    if agent:
        spent = spent.filter(agent=agent)
    if viewer is not None:
        # Only the agents the viewer's teams reach (accounts/teams.py).
        scope = teams.scope(viewer, teams.Power.VIEW)
        spent = spent.none() if scope.nothing else spent.filter(scope.q("agent"))
    rows = (
        spent.values("agent", "day")
        .annotate(
            calls=Sum("calls"),
            tokens_in=Sum("tokens_in"),
            tokens_out=Sum("tokens_out"),
            cost_usd=Sum("cost_usd"),
            cache_read_tokens=Sum("cache_read_tokens"),
            cache_write_tokens=Sum("cache_write_tokens"),
            cache_saved_usd=Sum("cache_saved_usd"),
            tool_cost_usd=Sum("tool_cost_usd"),
        )
        .order_by("agent", "day")
    )
    agents: dict[str, AgentSpend] = {}
    total = Spend()
    for row in rows:
        spend = Spend(
            calls=row["calls"],
            tokens_in=row["tokens_in"] or 0,
            tokens_out=row["tokens_out"] or 0,
            cost_usd=Decimal(row["cost_usd"] or 0).quantize(USD_PLACES),
            cache_read_tokens=row["cache_read_tokens"] or 0,
            cache_write_tokens=row["cache_write_tokens"] or 0,
            cache_saved_usd=Decimal(row["cache_saved_usd"] or 0).quantize(USD_PLACES),
            tool_cost_usd=Decimal(row["tool_cost_usd"] or 0).quantize(USD_PLACES),
        )
        slug = row["agent"]
        per_agent = agents.setdefault(slug, AgentSpend(agent=slug))
        per_agent.by_day[row["day"]] = spend
        per_agent.total.add(spend)
        total.add(spend)
    return CostReport(
        since=since,
        days=[since.date() + timedelta(days=i) for i in range(days)],
        agents=list(agents.values()),
        total=total,
    )
