"""The agent's budget at each step boundary (runs/engine/budget_check.py): a run whose spend
crosses the warning threshold goes on with a guard step and a notification, past the approval
threshold it waits for "budget exceeded: continue?", past the stop threshold it ends; each
threshold is noted once per period, on the run that crossed it."""

import dataclasses
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.models import Team, TeamAgent, TeamMember
from agentkit.agents import register
from agentkit.llm.scripted import text, tool_use
from agentkit.tools import Blast, tool
from approvals import decisions
from approvals.models import Approval
from runs import engine, rendering
from runs.budgets import models as budgets
from runs.engine import owned
from runs.models import Budget, BudgetCrossing, Run, Step

from ..harness import AGENT, drive

pytestmark = pytest.mark.django_db


@tool(reversible=True, blast=Blast.NONE, name="t_spend_20", cost_usd="20")
def t_spend_20(n: int) -> dict:
    """A paid lookup: 20 USD a call."""
    return {"n": n}


@pytest.fixture
def spender(test_agent, no_enqueue):
    agent = register(
        dataclasses.replace(
            test_agent,
            tools=(*test_agent.tools, "t_spend_20"),
            limits=dataclasses.replace(test_agent.limits, max_cost_usd=Decimal("1000")),
        )
    )
    Budget.objects.create(agent=AGENT, period="day", amount_usd=Decimal("100"))

    def launch() -> Run:
        return engine.launch(agent=agent, input={"task": "spend", "script": ""})

    return launch


def guard_steps(run: Run) -> list[str]:
    steps = run.steps.filter(kind=Step.Kind.GUARD).order_by("seq")
    return [s.data["threshold"] for s in steps if s.data.get("guard") == "budget"]


def test_a_run_crosses_warn_then_waits_for_approval_then_is_stopped(spender, script, approver):
    script([[tool_use("t_spend_20", n=i)] for i in range(10)])
    run = spender()
    # 4 calls: 80 USD (and a little for the model): the warning, and the run goes on.
    # 5 calls: 100 USD: the run waits for a person.
    assert drive(run)[-1] == Run.Status.WAITING
    assert guard_steps(run) == ["warn", "approve"]
    assert run.cost_usd > Decimal("100") and run.step_count == 5
    question = Approval.objects.get(run=run, status=Approval.Status.PENDING)
    assert question.question.startswith("Budget exceeded: continue? engine-test has spent 100.")
    assert question.options == ["continue", "stop"]
    assert question.explanation.startswith("budget: past 100% of the daily budget")

    decisions.decide(question.pk, user=approver, decision="answer", answer="continue")
    # One more call: 120 USD, past the stop threshold: the run ends at the next boundary.
    assert drive(run)[-1] == Run.Status.FAILED
    assert run.termination_reason == Run.Termination.BUDGET
    assert run.status_detail.startswith("budget exceeded: engine-test has spent 120.")
    assert run.step_count == 6
    assert guard_steps(run) == ["warn", "approve", "stop"]
    assert run.verify_chain() == (True, None)
    crossings = BudgetCrossing.objects.order_by("spent_usd")
    assert [(c.threshold, c.run_id) for c in crossings] == [
        ("warn", run.pk),
        ("approve", run.pk),
        ("stop", run.pk),
    ]
    # New runs are refused now.
    assert budgets.launch_refusal(AGENT).startswith("budget exceeded")


def test_each_threshold_is_noted_once_per_period_and_other_runs_ask_for_approval(
    spender, script, approver
):
    script([[tool_use("t_spend_20", n=i)] for i in range(5)] + [[text("done")]])
    first = spender()
    assert drive(first)[-1] == Run.Status.WAITING
    # A run launched now asks before its first model call; the crossings are not noted again.
    second = spender()
    assert drive(second)[-1] == Run.Status.WAITING
    assert guard_steps(second) == []
    assert second.step_count == 0
    assert BudgetCrossing.objects.count() == 2
    asked = Approval.objects.get(run=second)
    decisions.decide(asked.pk, user=approver, decision="answer", answer="stop")
    assert drive(second)[-1] == Run.Status.CANCELLED
    assert second.status_detail.startswith("stopped by arthur at the budget question")


def test_an_agent_without_a_budget_reads_none_at_its_step_boundaries(
    test_agent, no_enqueue, script
):
    script([[tool_use("t_echo", text="x")], [text("done")]])
    run = engine.launch(agent=test_agent, input={"task": "t", "script": ""})
    budgets._by_agent.clear()  # a read of the agent's budgets would not be hidden by the cache
    with CaptureQueriesContext(connection) as queries:
        assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    statements = [q["sql"] for q in queries.captured_queries]
    # Whether it has one came with the claim's read of the run, and no statement reads budgets.
    assert "runs_budget" in statements[0] and "lease_owner" in statements[0]
    assert not [s for s in statements[1:] if "runs_budget" in s]


def test_a_budget_added_while_a_run_works_applies_at_its_next_look(spender, script, monkeypatch):
    monkeypatch.setattr(owned, "RECHECK_AFTER_SECONDS", 0)  # the run is looked at every step
    Budget.objects.all().delete()  # the claim finds no budget
    added = []

    def budget_after_the_first_call(request):
        if not added:
            added.append(Budget.objects.create(agent=AGENT, period="day", amount_usd=10))

    script([[tool_use("t_spend_20", n=i)] for i in range(5)], on_call=budget_after_the_first_call)
    run = spender()
    assert drive(run)[-1] == Run.Status.FAILED
    assert run.termination_reason == Run.Termination.BUDGET
    assert run.step_count == 1  # the one call paid for, then stopped at the next boundary


# --- a team's budget ----------------------------------------------------------------------------
@pytest.fixture
def team_spender(test_agent, no_enqueue, operator):
    """The test agent and sql-analyst in team Ops, whose daily budget is 100 USD; sql-analyst
    already spent 70 of it today. The test agent's own budget is generous (1000 USD)."""
    from datetime import UTC, datetime

    from ..factories import make_run
    from ..test_costs import record

    agent = register(
        dataclasses.replace(
            test_agent,
            tools=(*test_agent.tools, "t_spend_20"),
            limits=dataclasses.replace(test_agent.limits, max_cost_usd=Decimal("1000")),
        )
    )
    team = Team.objects.create(name="Ops", slug="ops")
    TeamAgent.objects.create(team=team, agent=AGENT)
    TeamAgent.objects.create(team=team, agent="sql-analyst")
    Budget.objects.create(agent=AGENT, period="day", amount_usd=Decimal("1000"))
    Budget.objects.create(team=team, period="day", amount_usd=Decimal("100"))
    record(make_run(operator), datetime.now(UTC), cost="70", tokens_in=1, tokens_out=1)

    def launch() -> Run:
        return engine.launch(agent=agent, input={"task": "spend", "script": ""})

    return launch


def test_a_teams_budget_alone_is_seen_at_the_claim(team_spender, script):
    # The agent has no budget of its own: whether it answers to one is read with the run's
    # row, and its team's counts (else the check was skipped and the run spent on).
    Budget.objects.filter(team__isnull=True).delete()
    script([[tool_use("t_spend_20", n=i)] for i in range(10)])
    run = team_spender()
    assert drive(run)[-1] == Run.Status.WAITING
    assert guard_steps(run) == ["warn", "approve"]


def test_a_run_answers_to_its_teams_budget_summed_over_the_teams_agents(
    team_spender, script, approver
):
    script([[tool_use("t_spend_20", n=i)] for i in range(10)])
    run = team_spender()
    # 70 (sql-analyst) + 20: past 80 % of the team's 100, the warning; + 20 more: past 100 %,
    # the run waits, though its agent's own budget (1000) is far from any threshold.
    assert drive(run)[-1] == Run.Status.WAITING
    assert guard_steps(run) == ["warn", "approve"]
    assert run.step_count == 2
    guard = run.steps.filter(kind=Step.Kind.GUARD).order_by("seq").last().data
    assert guard["team"] == "Ops" and guard["agents"] == [AGENT, "sql-analyst"]
    shown = rendering.step_view(run.steps.filter(kind=Step.Kind.GUARD).order_by("seq").last())
    assert shown.title == "budget spent: runs need approval: team Ops"
    assert ("agents", f"{AGENT}, sql-analyst") in shown.facts
    TeamMember.objects.create(team=Team.objects.get(), user=approver, decide=True)
    question = Approval.objects.get(run=run, status=Approval.Status.PENDING)
    assert question.question.startswith(
        f"Budget exceeded: continue? team Ops ({AGENT}, sql-analyst) has spent 110."
    )
    decisions.decide(question.pk, user=approver, decision="answer", answer="continue")
    # 130: past the team's 120 %: the run stops, and new runs of either agent are refused.
    assert drive(run)[-1] == Run.Status.FAILED
    assert run.termination_reason == Run.Termination.BUDGET
    assert "team Ops" in run.status_detail
    assert guard_steps(run) == ["warn", "approve", "stop"]
    assert budgets.launch_refusal(AGENT).startswith("budget exceeded: team Ops")
    assert budgets.launch_refusal("sql-analyst").startswith("budget exceeded: team Ops")
    assert budgets.launch_refusal("refund-desk") == ""  # not the team's


def test_the_stricter_of_the_agents_and_the_teams_budget_wins(team_spender, script):
    # The agent's own budget is now the tight one: 10 USD, stop at 120 %. The team's is at
    # 70 % (no threshold): the run stops on its agent's budget all the same.
    Budget.objects.filter(agent=AGENT).update(amount_usd=Decimal("10"))
    script([[tool_use("t_spend_20", n=i)] for i in range(3)])
    run = team_spender()
    assert drive(run)[-1] == Run.Status.FAILED
    assert run.status_detail.startswith(f"budget exceeded: {AGENT} has spent 20.")
    # Both budgets are past a threshold now (the team's: 90 %, a warning); the agent's stop is
    # the most severe, listed first.
    assert [(s.budget.owner, s.level) for s in budgets.most_severe(AGENT)] == [
        (AGENT, "stop"),
        ("team Ops", "warn"),
    ]
