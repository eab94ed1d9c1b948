"""The stock-check demo: a supplier's API hangs, the call is abandoned at its deadline and
retried once, and the agent asks the next supplier. Transactional: the call runs on a tool
thread (runs/engine/deadlines.py)."""

import time
from decimal import Decimal

import pytest

from agentops.management.commands.seed_demo import ensure_demo_budgets
from runs import engine
from runs.budgets import models as budgets
from runs.models import Budget, Run

from .test_demo_flows import launch_default

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_hanging_supplier_times_out_and_the_agent_asks_the_next(operator, no_enqueue):
    run = launch_default("stock-check", operator)
    started = time.monotonic()
    assert engine.advance(run.pk, time_slice=60) == Run.Status.SUCCEEDED
    took = time.monotonic() - started
    # Two 2 s deadlines and their grace (about 6.5 s), not the supplier's 30 s hang: the margin
    # is for a loaded machine; the error below says which deadline fired.
    assert took < 25
    slow, fast = [s.data for s in run.steps.filter(kind="tool").order_by("seq")]
    assert slow["is_error"] and slow["attempts"] == 2
    assert slow["error"] == "check_supplier_stock timed out after 2s (after 2 attempts)"
    assert not fast["is_error"] and fast["result"]["in_stock"] > 0
    run.refresh_from_db()
    # The answer says what happened to both: the one that hung, the one that answered.
    assert run.output == (
        f"sales@acme-parts.example has {fast['result']['in_stock']} in stock. Before that, "
        "api@slow-parts.example did not answer (check_supplier_stock timed out after 2s "
        "(after 2 attempts))."
    )


def test_the_demo_run_crosses_its_agents_budget_warning(operator, no_enqueue):
    # The paid supplier API is billed per attempt, the hung ones too; the demo's daily budget
    # (seed_demo) is passed 80 % by one run: a warning on its timeline, and it goes on.
    ensure_demo_budgets()
    run = launch_default("stock-check", operator)
    assert engine.advance(run.pk, time_slice=60) == Run.Status.SUCCEEDED
    tools = run.steps.filter(kind="tool").order_by("seq")
    assert [s.cost_usd for s in tools] == [Decimal("0.02"), Decimal("0.01")]
    run.refresh_from_db()
    state = budgets.state_of(Budget.objects.get(agent="stock-check"))
    assert state.spent_usd == run.cost_usd and state.level == budgets.WARN
    (warning,) = run.steps.filter(kind="guard")
    assert warning.data["guard"] == "budget" and warning.data["threshold"] == "warn"
