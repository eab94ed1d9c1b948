"""Spend per agent and per UTC day (runs/costs.py), in the API and on the dashboard."""

import dataclasses
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal

import pytest
from django.db import transaction
from django.db.models import Count, Sum
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.models import ApiToken
from agentkit.agents import register
from agentkit.llm.scripted import text, tool_use
from agentkit.verification import Verifier
from runs import costs, engine
from runs.models import Run, Step

from .factories import make_run
from .harness import drive

pytestmark = pytest.mark.django_db


def record(
    run: Run,
    at: datetime,
    *,
    cost: str,
    tokens_in: int,
    tokens_out: int,
    kind="llm",
    usage: dict | None = None,
    **data,
):
    """A model step (or another kind) written the engine's way, at `at`."""
    with transaction.atomic():
        Run.locked(run.pk).append_step(
            kind,
            {"model": "claude-sonnet-4-5", "content": [], "usage": usage or {}, **data},
            cost_usd=Decimal(cost),
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            created_at=at,
        )


def today_utc() -> datetime:
    return datetime.combine(timezone.now().astimezone(UTC).date(), time.min, UTC)


@pytest.fixture
def two_agents(operator, no_enqueue) -> dict[str, list[Run]]:
    """Runs of two agents with model steps on two UTC days, and steps that are not model
    calls and cost nothing (a failed call, a free tool's step) which must not count."""
    today, yesterday = today_utc(), today_utc() - timedelta(days=1)
    sql = [make_run(operator, agent="sql-analyst") for _ in range(2)]
    refund = [make_run(operator, agent="refund-desk")]
    record(
        sql[0],
        yesterday + timedelta(hours=23, minutes=59),
        cost="0.0100",
        tokens_in=100,
        tokens_out=10,
    )
    record(sql[0], today + timedelta(minutes=1), cost="0.0200", tokens_in=200, tokens_out=20)
    record(sql[1], today + timedelta(minutes=2), cost="0.0030", tokens_in=30, tokens_out=3)
    record(refund[0], yesterday + timedelta(hours=1), cost="0.5000", tokens_in=5000, tokens_out=500)
    record(refund[0], yesterday + timedelta(hours=2), cost="0.2500", tokens_in=2500, tokens_out=250)
    record(
        sql[1], today + timedelta(minutes=3), cost="0", tokens_in=0, tokens_out=0, kind="llm_error"
    )
    record(
        refund[0], today + timedelta(minutes=4), cost="0", tokens_in=0, tokens_out=0, kind="tool"
    )
    return {"sql-analyst": sql, "refund-desk": refund}


def step_sums(runs: list[Run], **filters) -> dict:
    return Step.objects.filter(run__in=runs, kind="llm", **filters).aggregate(
        calls=Count("*"),
        tokens_in=Sum("tokens_in"),
        tokens_out=Sum("tokens_out"),
        cost=Sum("cost_usd"),
    )


# --- the figures ----------------------------------------------------------------------------
def test_totals_are_the_sums_of_the_model_steps_per_agent_and_day(two_agents):
    report = costs.cost_by_agent()
    today = today_utc().date()
    yesterday = today - timedelta(days=1)
    assert [a.agent for a in report.agents] == ["refund-desk", "sql-analyst"]
    for spent in report.agents:
        sums = step_sums(two_agents[spent.agent])
        assert (spent.total.calls, spent.total.tokens_in, spent.total.tokens_out) == (
            sums["calls"],
            sums["tokens_in"],
            sums["tokens_out"],
        )
        assert spent.total.cost_usd == sums["cost"]
        for day, spend in spent.by_day.items():
            start = datetime.combine(day, time.min, UTC)
            on_day = step_sums(
                two_agents[spent.agent],
                created_at__gte=start,
                created_at__lt=start + timedelta(days=1),
            )
            assert (spend.calls, spend.cost_usd) == (on_day["calls"], on_day["cost"])
    sql, refund = report.agents[1], report.agents[0]
    assert sql.by_day[yesterday].cost_usd == Decimal("0.01")  # 23:59 UTC is still yesterday
    assert sql.by_day[today].calls == 2 and sql.by_day[today].cost_usd == Decimal("0.023")
    assert list(refund.by_day) == [yesterday]
    assert refund.total.tokens_in == 7500 and refund.total.cost_usd == Decimal("0.75")
    assert report.total.calls == 5 and report.total.cost_usd == Decimal("0.783")
    assert report.days[-2:] == [yesterday, today] and len(report.days) == costs.DEFAULT_DAYS


@pytest.fixture
def checked_and_summarised(test_agent, script, no_enqueue) -> Run:
    """A finished run whose agent summarises its older turns and has a model verifier: model
    calls that are not the agent's turns, each charged to the run."""
    agent = register(
        dataclasses.replace(
            test_agent,
            context_budget_tokens=1500,
            summarise_context=True,
            verifier=Verifier(prompt="Check it.", model="claude-haiku-4-5"),
        )
    )
    turns = [[text(f"word {i}"), tool_use("t_big", n=i, size=900)] for i in range(6)]
    script([*turns, [text("finished")]], verifier_turns=[[text("PASS")]])
    run = engine.launch(agent=agent, input={"task": "echo", "script": ""}, provider="scripted")
    drive(run)
    assert run.status == Run.Status.SUCCEEDED
    kinds = set(run.steps.filter(cost_usd__gt=0).values_list("kind", flat=True))
    assert kinds == {Step.Kind.LLM, Step.Kind.SUMMARY, Step.Kind.VERIFY}
    return run


def test_a_runs_summaries_and_verifier_calls_count_so_the_report_agrees_with_the_run(
    checked_and_summarised,
):
    run = checked_and_summarised
    spent = costs.cost_by_agent(agent=run.agent).agents[0]
    assert spent.total.cost_usd == run.cost_usd
    assert (spent.total.tokens_in, spent.total.tokens_out) == (run.tokens_in, run.tokens_out)
    model_calls = run.steps.filter(kind__in=["llm", "summary", "verify"], cost_usd__gt=0)
    assert spent.total.calls == model_calls.count() > run.step_count
    assert spent.total.tool_cost_usd == 0


def test_a_paid_tool_call_counts_as_the_tools_part_of_the_cost(operator, no_enqueue):
    run = make_run(operator, agent="sql-analyst")
    now = timezone.now()
    record(run, now, cost="0.5", tokens_in=10, tokens_out=1)
    record(run, now, cost="0.25", tokens_in=0, tokens_out=0, kind="tool")
    spent = costs.cost_by_agent(agent="sql-analyst").total
    assert (spent.calls, spent.cost_usd, spent.tool_cost_usd) == (
        1,
        Decimal("0.75"),
        Decimal("0.25"),
    )


def test_a_discarded_answer_charged_to_the_run_only_is_not_counted(two_agents):
    # runs/engine/owned.py charge_discarded: the run's counter moves, no step is written.
    refund = two_agents["refund-desk"][0]
    Run.objects.filter(pk=refund.pk).update(cost_usd=Decimal("10"))
    spent = costs.cost_by_agent(agent="refund-desk").agents[0]
    assert spent.total.cost_usd == Decimal("0.75")


def test_the_window_starts_at_midnight_utc_and_leaves_older_steps_out(operator, no_enqueue):
    now = datetime(2026, 3, 10, 15, 0, tzinfo=UTC)
    run = make_run(operator)
    start = datetime(2026, 3, 9, tzinfo=UTC)  # days=2: yesterday and today
    record(run, start - timedelta(microseconds=1), cost="1", tokens_in=1, tokens_out=1)
    record(run, start, cost="0.25", tokens_in=2, tokens_out=3)
    report = costs.cost_by_agent(days=2, now=now)
    assert report.since == start
    assert report.days == [start.date(), now.date()]
    assert report.total.calls == 1 and report.total.cost_usd == Decimal("0.25")
    assert costs.cost_by_agent(days=3, now=now).total.cost_usd == Decimal("1.25")


def test_one_agent_only(two_agents):
    report = costs.cost_by_agent(agent="refund-desk")
    assert [a.agent for a in report.agents] == ["refund-desk"]
    assert report.total.cost_usd == Decimal("0.75")
    assert costs.cost_by_agent(agent="nobody").agents == []


@pytest.mark.parametrize("days", [0, -1, costs.MAX_DAYS + 1])
def test_the_window_is_bounded(days):
    with pytest.raises(ValueError, match="between 1 and"):
        costs.cost_by_agent(days=days)


# --- API ------------------------------------------------------------------------------------
def bearer(user) -> Client:
    _, raw = ApiToken.issue(user, "tests")
    return Client(headers={"Authorization": f"Bearer {raw}"})


NO_CACHE = {"cache_read_tokens": 0, "cache_write_tokens": 0, "cache_saved_usd": "0.000000"}


def test_the_api_gives_rows_per_agent_and_day_and_totals(two_agents, viewer):
    response = bearer(viewer).get("/api/costs", {"days": 7})
    assert response.status_code == 200
    body = response.json()
    today = today_utc().date()
    yesterday = today - timedelta(days=1)
    assert body["days"] == 7
    assert body["since"].startswith((today - timedelta(days=6)).isoformat())
    assert body["rows"] == [
        {
            "agent": "refund-desk",
            "day": yesterday.isoformat(),
            "model_calls": 2,
            "tokens_in": 7500,
            "tokens_out": 750,
            "cost_usd": "0.750000",
            **NO_CACHE,
            "tool_cost_usd": "0.000000",
        },
        {
            "agent": "sql-analyst",
            "day": yesterday.isoformat(),
            "model_calls": 1,
            "tokens_in": 100,
            "tokens_out": 10,
            "cost_usd": "0.010000",
            **NO_CACHE,
            "tool_cost_usd": "0.000000",
        },
        {
            "agent": "sql-analyst",
            "day": today.isoformat(),
            "model_calls": 2,
            "tokens_in": 230,
            "tokens_out": 23,
            "cost_usd": "0.023000",
            **NO_CACHE,
            "tool_cost_usd": "0.000000",
        },
    ]
    assert body["agents"] == [
        {
            "agent": "refund-desk",
            "model_calls": 2,
            "tokens_in": 7500,
            "tokens_out": 750,
            "cost_usd": "0.750000",
            **NO_CACHE,
            "tool_cost_usd": "0.000000",
        },
        {
            "agent": "sql-analyst",
            "model_calls": 3,
            "tokens_in": 330,
            "tokens_out": 33,
            "cost_usd": "0.033000",
            **NO_CACHE,
            "tool_cost_usd": "0.000000",
        },
    ]
    assert body["total"] == {
        "model_calls": 5,
        "tokens_in": 7830,
        "tokens_out": 783,
        "cost_usd": "0.783000",
        **NO_CACHE,
        "tool_cost_usd": "0.000000",
    }


def test_the_api_filters_by_agent(two_agents, viewer):
    body = bearer(viewer).get("/api/costs", {"agent": "sql-analyst"}).json()
    assert {r["agent"] for r in body["rows"]} == {"sql-analyst"}
    assert [a["agent"] for a in body["agents"]] == ["sql-analyst"]
    assert body["days"] == costs.DEFAULT_DAYS


@pytest.mark.parametrize("days", ["0", "91", "seven", "-3"])
def test_a_bad_window_is_422_with_a_message(viewer, days):
    response = bearer(viewer).get("/api/costs", {"days": days})
    assert response.status_code == 422
    [error] = response.json()["errors"]
    assert error["loc"] == ["query", "days"] and error["msg"]


def test_the_api_needs_a_role(client, django_user_model):
    assert client.get("/api/costs").status_code == 401
    nobody = django_user_model.objects.create_user("nobody", password="x")
    assert bearer(nobody).get("/api/costs").status_code in (401, 403)


# --- dashboard ------------------------------------------------------------------------------
def test_the_dashboard_shows_cost_by_agent(client, viewer, two_agents):
    client.force_login(viewer)
    response = client.get(reverse("runs:dashboard"))
    html = response.content.decode()
    assert '<section id="dashboard-costs"' in html
    assert "Cost by agent" in html and "from recorded steps: model calls and tools" in html
    refund_row = html.split('data-agent="refund-desk"', 1)[1].split("</tr>", 1)[0]
    assert "$0.7500" in refund_row and ">7500<" in refund_row and ">2<" in refund_row
    sql_row = html.split('data-agent="sql-analyst"', 1)[1].split("</tr>", 1)[0]
    assert "$0.0100" in sql_row and "$0.0230" in sql_row and "$0.0330" in sql_row
    totals = html.split("All agents", 1)[1].split("</tr>", 1)[0]
    assert "$0.7830" in totals and ">7830<" in totals


def test_the_cost_card_refreshes_alone(client, viewer, two_agents):
    client.force_login(viewer)
    response = client.get(
        reverse("runs:dashboard"), HTTP_HX_REQUEST="true", HTTP_HX_TARGET="dashboard-costs"
    )
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="dashboard-costs"')
    assert "Runs by status" not in html and "$0.7830" in html


def test_the_cost_card_escapes_agent_names_and_says_when_empty(
    client, viewer, operator, no_enqueue
):
    client.force_login(viewer)
    assert (
        "No model calls in the last 7 days."
        in client.get(reverse("runs:dashboard")).content.decode()
    )
    run = make_run(operator)
    Run.objects.filter(pk=run.pk).update(agent='<img src=x onerror="alert(1)">')
    record(run, timezone.now(), cost="0.1", tokens_in=1, tokens_out=1)
    html = client.get(reverse("runs:dashboard")).content.decode()
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html
    assert '<img src=x onerror="alert(1)">' not in html


# --- prompt caching ---------------------------------------------------------------------------
@pytest.fixture
def cached(operator, no_enqueue) -> Run:
    """A run whose first call wrote the cache and whose second read it."""
    run = make_run(operator, agent="sql-analyst")
    at = today_utc() + timedelta(minutes=5)
    record(
        run,
        at,
        cost="0.0040",
        tokens_in=1100,
        tokens_out=10,
        usage={"input_tokens": 100, "cache_creation_input_tokens": 1000},
        cache_saved_usd="-0.000750",
    )
    record(
        run,
        at,
        cost="0.0006",
        tokens_in=1150,
        tokens_out=10,
        usage={
            "input_tokens": 50,
            "cache_read_input_tokens": 1000,
            "cache_creation_input_tokens": 100,
        },
        cache_saved_usd="0.002625",
    )
    return run


def test_cache_reads_writes_and_savings_are_added_up_per_agent_and_day(cached, viewer):
    total = costs.cost_by_agent().total
    assert (total.cache_read_tokens, total.cache_write_tokens) == (1000, 1100)
    assert total.cache_saved_usd == Decimal("0.001875")
    # Saved against what the calls would have cost without the cache: 0.001875 of 0.006475.
    assert total.saved_percent == 29
    body = bearer(viewer).get("/api/costs").json()
    assert body["total"]["cache_saved_usd"] == "0.001875"
    assert body["agents"][0]["cache_read_tokens"] == 1000


def test_the_dashboard_says_what_caching_saved(client, viewer, cached):
    client.force_login(viewer)
    html = client.get(reverse("runs:dashboard")).content.decode()
    row = html.split('data-agent="sql-analyst"', 1)[1].split("</tr>", 1)[0]
    assert '<td class="num cache-saved"><span title="1000 tokens read from the cache' in row
    assert "$0.0019" in row
    assert "Prompt caching saved <strong>$0.0019</strong> (29 %)" in html


def test_a_cache_only_written_so_far_shows_what_it_cost_more(client, viewer, operator):
    run = make_run(operator, agent="sql-analyst")
    record(
        run,
        today_utc() + timedelta(minutes=5),
        cost="0.0040",
        tokens_in=1100,
        tokens_out=10,
        usage={"input_tokens": 100, "cache_creation_input_tokens": 1000},
        cache_saved_usd="-0.000750",
    )
    client.force_login(viewer)
    html = client.get(reverse("runs:dashboard")).content.decode()
    row = html.split('data-agent="sql-analyst"', 1)[1].split("</tr>", 1)[0]
    assert "-$0.0008" in row
    assert "Prompt caching cost <strong>$0.0008</strong> more than it saved so far" in html


def test_no_savings_line_without_cached_calls(client, viewer, two_agents):
    client.force_login(viewer)
    html = client.get(reverse("runs:dashboard")).content.decode()
    assert "Prompt caching saved" not in html
    row = html.split('data-agent="sql-analyst"', 1)[1].split("</tr>", 1)[0]
    assert '<td class="num cache-saved"><span class="muted">' in row
