"""Budgets on Postgres: the spend of a time zone's first hours is read through the steps'
BRIN index, the spend trigger counts what the engine charges, and two workers that see a
threshold crossed at once record it once."""

import threading
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection, connections

from runs.budgets import models as budgets
from runs.models import Budget, BudgetCrossing

from ..conftest import on_postgres
from .factories import make_run
from .test_costs import record

pytestmark = [on_postgres, pytest.mark.django_db(transaction=True)]


def test_the_first_hours_of_a_time_zone_period_are_summed_from_the_steps_by_time(
    operator, no_enqueue
):
    # A BRIN index on the steps' time serves that range (bench/budget_spend.py measures it).
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'runs_step_created_brin'")
        (definition,) = cursor.fetchone()
    assert "USING brin (created_at)" in definition
    start = datetime(2026, 3, 9, 23, tzinfo=UTC)  # a Paris day
    run = make_run(operator)
    record(run, start - timedelta(minutes=1), cost="4", tokens_in=1, tokens_out=1)
    record(run, start + timedelta(minutes=30), cost="0.125", tokens_in=1, tokens_out=1)
    record(run, start + timedelta(hours=2), cost="0.5", tokens_in=0, tokens_out=0, kind="tool")
    assert budgets.spent("sql-analyst", start, start + timedelta(hours=3)) == Decimal("0.625")


def test_two_workers_seeing_a_crossing_at_once_record_it_once(operator, no_enqueue):
    budget = Budget.objects.create(agent="sql-analyst", period="day", amount_usd=Decimal("1"))
    run = make_run(operator)
    state = budgets.BudgetState(
        budget, datetime(2026, 3, 10, tzinfo=UTC), datetime(2026, 3, 11, tzinfo=UTC), Decimal("0.9")
    )
    barrier = threading.Barrier(4)
    won: list[bool] = []

    def worker():
        try:
            barrier.wait()
            won.append(budgets.record_crossing(state, "warn", run) is not None)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(won) == [False, False, False, True]
    assert BudgetCrossing.objects.count() == 1
