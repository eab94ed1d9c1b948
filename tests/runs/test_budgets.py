"""Budget rules (runs/budgets/models.py): a period's bounds in a time zone, the spend in it read
from the recorded steps, the level a spend reaches, a threshold crossed once per period."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.cache import cache
from django.db import IntegrityError, transaction

from runs.budgets import models as budgets
from runs.models import Budget, BudgetCrossing

from .factories import make_run
from .test_costs import record

pytestmark = pytest.mark.django_db


def at(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


# --- period bounds ------------------------------------------------------------------------------
def test_a_day_in_utc_is_the_utc_day():
    assert budgets.period_bounds("day", "UTC", at(2026, 3, 10, 15)) == (
        at(2026, 3, 10),
        at(2026, 3, 11),
    )


def test_a_day_in_a_time_zone_starts_at_its_local_midnight():
    # 02:00 UTC on 2 March is still 1 March in New York (UTC-5 in winter).
    assert budgets.period_bounds("day", "America/New_York", at(2026, 3, 2, 2)) == (
        at(2026, 3, 1, 5),
        at(2026, 3, 2, 5),
    )


def test_the_day_dst_begins_is_23_hours_long_and_the_day_it_ends_25():
    # Europe/Paris: clocks go forward on 29 March 2026 and back on 25 October 2026.
    start, end = budgets.period_bounds("day", "Europe/Paris", at(2026, 3, 29, 12))
    assert (start, end) == (at(2026, 3, 28, 23), at(2026, 3, 29, 22))
    assert end - start == timedelta(hours=23)
    start, end = budgets.period_bounds("day", "Europe/Paris", at(2026, 10, 25, 12))
    assert (start, end) == (at(2026, 10, 24, 22), at(2026, 10, 25, 23))
    assert end - start == timedelta(hours=25)


def test_a_week_runs_monday_to_sunday_local_time():
    # Sunday 8 March 2026, 15:30 UTC is Monday the 9th, 00:30 in Tokyo: a new week there.
    start, end = budgets.period_bounds("week", "Asia/Tokyo", at(2026, 3, 8, 15, 30))
    assert (start, end) == (at(2026, 3, 8, 15), at(2026, 3, 15, 15))
    # ... and an hour earlier, still the week before.
    assert budgets.period_bounds("week", "Asia/Tokyo", at(2026, 3, 8, 14, 30))[0] == at(
        2026, 3, 1, 15
    )


def test_a_month_across_a_dst_change_keeps_local_midnights():
    start, end = budgets.period_bounds("month", "Europe/Paris", at(2026, 3, 15))
    assert (start, end) == (at(2026, 2, 28, 23), at(2026, 3, 31, 22))
    december = budgets.period_bounds("month", "UTC", at(2026, 12, 31, 23, 59))
    assert december == (at(2026, 12, 1), at(2027, 1, 1))


# --- spend --------------------------------------------------------------------------------------
def test_spend_in_utc_is_the_whole_days_rows(operator, no_enqueue):
    run = make_run(operator, agent="sql-analyst")
    record(run, at(2026, 3, 9, 23, 59), cost="1", tokens_in=1, tokens_out=1)  # before
    record(run, at(2026, 3, 10, 0, 0), cost="0.25", tokens_in=1, tokens_out=1)
    record(run, at(2026, 3, 10, 9), cost="0.5", tokens_in=0, tokens_out=0, kind="tool")
    record(
        make_run(operator, agent="refund-desk"),
        at(2026, 3, 10, 1),
        cost="7",
        tokens_in=1,
        tokens_out=1,
    )
    assert budgets.spent("sql-analyst", at(2026, 3, 10), at(2026, 3, 10, 12)) == Decimal("0.75")


def test_spend_in_a_time_zone_counts_the_steps_of_its_first_hours(operator, no_enqueue):
    # A Paris day from 23:00 UTC: the hour before UTC midnight is read from the steps.
    run = make_run(operator, agent="sql-analyst")
    record(run, at(2026, 3, 9, 22, 59), cost="4", tokens_in=1, tokens_out=1)  # the day before
    record(run, at(2026, 3, 9, 23, 30), cost="0.125", tokens_in=1, tokens_out=1)
    record(run, at(2026, 3, 10, 8), cost="0.5", tokens_in=1, tokens_out=1)
    start, _ = budgets.period_bounds("day", "Europe/Paris", at(2026, 3, 10, 8, 30))
    assert start == at(2026, 3, 9, 23)
    assert budgets.spent("sql-analyst", start, at(2026, 3, 10, 8, 30)) == Decimal("0.625")


def test_a_period_that_began_today_utc_is_read_from_its_steps_alone(operator, no_enqueue):
    # A New York day began at 04:00 UTC (EDT since 8 March): the UTC day's row also holds
    # what was spent from 00:00 to 04:00, the New York day before.
    run = make_run(operator, agent="sql-analyst")
    record(run, at(2026, 3, 10, 3, 59), cost="3", tokens_in=1, tokens_out=1)
    record(run, at(2026, 3, 10, 6), cost="0.2", tokens_in=1, tokens_out=1)
    start, _ = budgets.period_bounds("day", "America/New_York", at(2026, 3, 10, 7))
    assert start == at(2026, 3, 10, 4)
    assert budgets.spent("sql-analyst", start, at(2026, 3, 10, 7)) == Decimal("0.2")


def test_the_settled_first_hours_are_summed_once(operator, no_enqueue, django_assert_num_queries):
    cache.clear()
    run = make_run(operator, agent="sql-analyst")
    record(run, at(2026, 3, 9, 23, 30), cost="0.125", tokens_in=1, tokens_out=1)
    now = at(2026, 3, 10, 8)
    first = budgets.spent("sql-analyst", at(2026, 3, 9, 23), now)
    with django_assert_num_queries(1):  # the day rows only
        assert budgets.spent("sql-analyst", at(2026, 3, 9, 23), now) == first


# --- levels and crossings -----------------------------------------------------------------------
def budget(**fields) -> Budget:
    defaults = {"agent": "sql-analyst", "period": "day", "amount_usd": Decimal("10")}
    return Budget.objects.create(**{**defaults, **fields})


@pytest.mark.parametrize(
    ("spend", "level"),
    [
        ("0", "ok"),
        ("7.99", "ok"),
        ("8", "warn"),
        ("9.99", "warn"),
        ("10", "approve"),
        ("11.99", "approve"),
        ("12", "stop"),
        ("100", "stop"),
    ],
)
def test_the_level_a_spend_reaches(spend, level):
    assert budgets.level_of(Budget(amount_usd=Decimal("10")), Decimal(spend)) == level


def test_a_threshold_is_crossed_once_per_period(operator, no_enqueue):
    b = budget()
    run = make_run(operator, agent="sql-analyst")
    state = budgets.BudgetState(b, at(2026, 3, 10), at(2026, 3, 11), Decimal("8.5"))
    assert state.level == "warn" and state.crossed == ["warn"]
    assert budgets.record_crossing(state, "warn", run) is not None
    assert budgets.record_crossing(state, "warn", run) is None
    tomorrow = budgets.BudgetState(b, at(2026, 3, 11), at(2026, 3, 12), Decimal("9"))
    assert budgets.record_crossing(tomorrow, "warn", run) is not None
    assert BudgetCrossing.objects.filter(budget=b).count() == 2


def test_thresholds_must_ascend_and_the_amount_be_positive():
    with pytest.raises(IntegrityError), transaction.atomic():
        budget(warn_percent=100, approve_percent=100)
    with pytest.raises(IntegrityError), transaction.atomic():
        budget(amount_usd=Decimal("0"))
    budget()
    with pytest.raises(IntegrityError), transaction.atomic():
        budget()  # one per agent and period


def test_a_launch_is_refused_past_the_stop_threshold_only(operator, no_enqueue):
    budget(amount_usd=Decimal("1"))
    run = make_run(operator, agent="sql-analyst")
    record(run, datetime.now(UTC), cost="1.1", tokens_in=1, tokens_out=1)
    assert budgets.launch_refusal("sql-analyst") == ""  # 110%: approval, not refusal
    record(run, datetime.now(UTC), cost="0.1", tokens_in=1, tokens_out=1)
    refusal = budgets.launch_refusal("sql-analyst")
    assert refusal.startswith("budget exceeded: sql-analyst has spent 1.20 of its 1.00 USD")
    assert budgets.launch_refusal("other") == ""
