"""Cross-run drift (runs/drift.py): an agent's recent runs against the runs before them, on
seeded runs: what is flagged, with which numbers, what is not, and in how many queries."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from accounts.models import Team, TeamAgent, TeamMember
from runs import drift
from runs.models import Run, Step

from .factories import make_run

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def four_runs(settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "DRIFT_RUNS": 4}


def runs(user, n: int, *, agent="sql-analyst", start: int = 0, tools=(), decisions=(), **fields):
    """`n` finished runs, the first finishing `start` hours ago and each later one an hour
    after; each with the tool calls and decisions given."""
    made = []
    for i in range(n):
        values = {
            "status": Run.Status.SUCCEEDED,
            "cost_usd": Decimal("0.02"),
            "step_count": 4,
            "output": f"report {start}-{i}",
            **fields,
        }
        run = make_run(user, agent=agent, **values)
        Run.objects.filter(pk=run.pk).update(
            finished_at=timezone.now() - timedelta(hours=start - i)
        )
        with transaction.atomic():
            locked = Run.locked(run.pk)
            for tool in tools:
                locked.append_step(Step.Kind.TOOL, {"tool": tool, "args": {}})
            for decision in decisions:
                locked.append_step(
                    Step.Kind.DECISION, {"kind": "action", "decision": decision, "tool": "x"}
                )
        made.append(run)
    return made


def metrics(found) -> dict:
    return {d.agent: {f.metric: f.words for f in d.findings} for d in found}


def test_steady_runs_are_not_flagged(operator, no_enqueue):
    runs(operator, 4, start=100, tools=["run_query", "email_report"], decisions=["approve"])
    runs(operator, 4, start=50, tools=["run_query", "email_report"], decisions=["approve"])
    assert drift.flags(Run.objects.all()) == []


def test_a_rise_in_cost_and_model_calls_is_flagged_with_its_numbers(operator, no_enqueue):
    runs(operator, 4, start=100)
    recent = runs(operator, 4, start=50, cost_usd=Decimal("0.05"), step_count=9)
    (found,) = drift.flags(Run.objects.all())
    assert (found.agent, found.recent_runs, found.baseline_runs) == ("sql-analyst", 4, 4)
    assert metrics([found])["sql-analyst"] == {
        "cost": "cost per run 0.0500 USD, was 0.0200 (+150%)",
        "steps": "model calls per run 9.0, was 4.0 (+125%)",
    }
    # Fewer runs than two windows: no baseline, nothing compared.
    assert drift.flags(Run.objects.filter(pk__in=[r.pk for r in recent])) == []


def test_rejections_failures_and_the_tool_mix_are_flagged(operator, no_enqueue):
    runs(operator, 4, start=100, tools=["email_report", "run_query"], decisions=["approve"])
    runs(operator, 2, start=50, tools=["run_query", "run_query"], decisions=["reject"])
    runs(operator, 2, start=48, tools=["run_query"], decisions=["reject"], status="failed")
    assert metrics(drift.flags(Run.objects.all()))["sql-analyst"] == {
        "failures": "runs failed 50%, was 0%",
        "rejections": "gated calls rejected 100% (4 of 4), was 0%",
        "tools": "tool mix moved 0.50: email_report 0% (was 50%), run_query 100% (was 50%)",
    }


def test_the_same_output_three_unattended_runs_running_is_flagged_without_a_baseline(
    operator, no_enqueue
):
    runs(operator, 1, start=10, output="Stock report: 12 items low", trigger="schedule")
    runs(operator, 3, start=5, output="Stock report: 40 items low", trigger="schedule")
    assert metrics(drift.flags(Run.objects.all())) == {
        "sql-analyst": {
            "repeated_output": (
                "the last 3 unattended successful runs gave the very same output, verbatim"
            )
        }
    }
    runs(operator, 1, start=1, output="Stock report: 41 items low", trigger="schedule")
    assert drift.flags(Run.objects.all()) == []
    # Launched by hand, the same output is someone's own to see: not flagged.
    runs(operator, 3, start=0, output="Revenue: 42", agent="refund-desk", trigger="form")
    assert drift.flags(Run.objects.all()) == []


def test_it_reads_the_same_few_queries_for_one_agent_or_many(operator, no_enqueue):
    runs(operator, 8, start=100, tools=["run_query"])

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            drift.flags(Run.objects.all())
        return len(captured)

    one = queries()
    runs(operator, 8, start=100, agent="refund-desk", tools=["lookup_order"])
    assert queries() == one == 3


def test_the_dashboard_shows_the_flags_to_those_who_see_the_agent(
    client, operator, viewer, no_enqueue
):
    runs(operator, 4, start=100)
    runs(operator, 4, start=50, cost_usd=Decimal("0.05"))
    client.force_login(viewer)
    page = client.get(reverse("runs:dashboard")).content.decode()
    assert 'data-agent="sql-analyst"' in page
    assert "cost per run 0.0500 USD, was 0.0200 (+150%)" in page
    # Once a team the viewer is not in owns the agent, its drift is not theirs to see.
    team = Team.objects.create(name="Data", slug="data")
    TeamAgent.objects.create(team=team, agent="sql-analyst")
    TeamMember.objects.create(team=team, user=operator)
    page = client.get(reverse("runs:dashboard")).content.decode()
    assert "dashboard-drift" not in page


def test_the_agents_run_list_shows_its_flags(client, operator, no_enqueue):
    runs(operator, 4, start=100)
    runs(operator, 4, start=50, step_count=1)
    client.force_login(operator)
    page = client.get(reverse("runs:list"), {"agent": "sql-analyst"}).content.decode()
    assert "model calls per run 1.0, was 4.0 (-75%)" in page
    assert 'id="dashboard-drift" class="card wide">' in page  # no refresh from the dashboard
    assert (
        "dashboard-drift"
        not in client.get(reverse("runs:list"), {"agent": "refund-desk"}).content.decode()
    )
