"""What runs cost: AgentDaySpend (kept by a database trigger), Budget and BudgetCrossing (the
rules that read them are runs/budgets/models.py's)."""

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from .run import Run


class AgentDaySpend(models.Model):
    """Model calls, tokens and cost of one agent on one UTC day, kept by the database itself:
    a trigger on the insert of each step that is a model call or carries a cost adds it here
    (runs/migrations/0015, 0018), whoever writes it (the engine, the gateway, an import).
    `cost_usd` is everything charged (model calls and tools), `tool_cost_usd` the tools' part.
    Spend per agent and day (runs/costs.py) then reads a few rows per day instead of summing
    every charged step of the window.

    A day of an agent is SPEND_SHARDS rows (the shard is picked from the run's id): workers
    stepping runs of one agent at once would otherwise queue on one row lock until commit.
    Written by the trigger only."""

    agent = models.CharField(max_length=64)
    day = models.DateField()
    shard = models.PositiveSmallIntegerField()
    calls = models.PositiveIntegerField(default=0)
    tokens_in = models.BigIntegerField(default=0)
    tokens_out = models.BigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=16, decimal_places=6, default=Decimal(0))
    # Prompt caching: tokens read from and written to the cache (part of tokens_in), and what
    # it saved (the steps' data: runs/engine/model.py cache_saving). From migration 0018 on.
    cache_read_tokens = models.BigIntegerField(default=0)
    cache_write_tokens = models.BigIntegerField(default=0)
    cache_saved_usd = models.DecimalField(max_digits=16, decimal_places=6, default=Decimal(0))
    tool_cost_usd = models.DecimalField(max_digits=16, decimal_places=6, default=Decimal(0))

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "day", "shard"], name="spend_agent_day_shard")
        ]
        indexes = [models.Index(fields=["day"], name="runs_spend_day_idx")]

    def __str__(self) -> str:
        return f"{self.agent} {self.day} #{self.shard}"


SPEND_SHARDS = 8


BUDGET_THRESHOLDS_RISE = "The thresholds must rise: warn below ask-approval below stop."


class Budget(models.Model):
    """What one agent, or one team's agents together, may spend (model calls and tools, as
    their steps record them) in a period of the calendar in a time zone, and what happens as
    the spend grows: past `warn_percent` the approvers are told; past `approve_percent` a run
    goes on (or starts) only when a person says so; past `stop_percent` runs are stopped and
    new ones refused. A run answers to its agent's budget and to those of the teams owning its
    agent; the most severe wins. The rules are runs/budgets/models.py's; the engine applies them at
    each step boundary."""

    class Period(models.TextChoices):
        DAY = "day"
        WEEK = "week"  # Monday to Sunday
        MONTH = "month"

    # Exactly one of the two: an agent's budget names the agent; a team's budget names the
    # team (its agents are whichever it owns when the spend is read) and leaves `agent` "".
    agent = models.CharField(max_length=64, blank=True)
    team = models.ForeignKey(
        "accounts.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="budgets"
    )
    period = models.CharField(max_length=8, choices=Period.choices, default=Period.MONTH)
    time_zone = models.CharField(max_length=64, default="UTC")
    amount_usd = models.DecimalField(max_digits=12, decimal_places=2)
    warn_percent = models.PositiveSmallIntegerField(default=80)
    approve_percent = models.PositiveSmallIntegerField(default=100)
    stop_percent = models.PositiveSmallIntegerField(default=120)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["agent", "team__name", "period"]
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "period"],
                condition=Q(team__isnull=True),
                name="budget_one_per_agent_period",
                violation_error_message="This agent already has a budget for this period.",
            ),
            models.UniqueConstraint(
                fields=["team", "period"],
                condition=Q(team__isnull=False),
                name="budget_one_per_team_period",
                violation_error_message="This team already has a budget for this period.",
            ),
            models.CheckConstraint(
                condition=(Q(team__isnull=True) & ~Q(agent=""))
                | (Q(team__isnull=False) & Q(agent="")),
                name="budget_agent_or_team",
                violation_error_message="A budget is either an agent's or a team's: name one.",
            ),
            models.CheckConstraint(condition=Q(amount_usd__gt=0), name="budget_amount_positive"),
            models.CheckConstraint(
                condition=Q(warn_percent__gt=0)
                & Q(warn_percent__lt=F("approve_percent"))
                & Q(approve_percent__lt=F("stop_percent")),
                name="budget_thresholds_ascending",
                violation_error_message=BUDGET_THRESHOLDS_RISE,
            ),
        ]

    def __str__(self) -> str:
        return f"{self.owner}: {self.amount_usd} USD a {self.period}"

    @property
    def owner(self) -> str:
        """Whose budget, in words: the agent's slug, or "team <name>"."""
        return f"team {self.team.name}" if self.team is not None else self.agent

    @property
    def periodic(self) -> str:
        """ "daily", "weekly", "monthly"."""
        return "daily" if self.period == self.Period.DAY else f"{self.period}ly"


class BudgetCrossing(models.Model):
    """A threshold of a budget crossed in one of its periods: once each (the unique
    constraint is what makes it once, whichever worker sees it first), with the run it was
    seen on (that run's timeline has the step) and the spend then."""

    class Threshold(models.TextChoices):
        WARN = "warn"
        APPROVE = "approve"
        STOP = "stop"

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="crossings")
    period_start = models.DateTimeField()
    threshold = models.CharField(max_length=8, choices=Threshold.choices)
    spent_usd = models.DecimalField(max_digits=16, decimal_places=6)
    run = models.ForeignKey(Run, null=True, on_delete=models.SET_NULL, related_name="+")
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["budget", "period_start", "threshold"], name="budget_crossed_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.budget} {self.threshold} at {self.period_start:%Y-%m-%d}"
