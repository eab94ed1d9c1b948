"""The revenue-check demo agent: its first answer is not JSON (the output schema sends it
back), its second has the wrong figure (the verifier recomputes it with a read-only query and
sends it back), its third passes both, all with the scripted model."""

import json

import pytest

from agentkit.agents import get_agent
from demo import shop
from demo.agents import TOTAL_REVENUE_SQL
from history.replay import replay
from runs import engine
from runs.models import Run, Step
from runs.rendering import step_view
from tests.demo.test_demo_flows import launch_default

pytestmark = pytest.mark.django_db


def true_total() -> tuple[float, int]:
    with shop.connect_readonly() as db:
        revenue, orders = db.execute(TOTAL_REVENUE_SQL).fetchone()
    return revenue, orders


def checks(run: Run) -> list[tuple[str, bool]]:
    return [
        (kind, data["passed"])
        for kind, data in run.steps.filter(kind__in=(Step.Kind.GUARD, Step.Kind.VERIFY))
        .order_by("seq")
        .values_list("kind", "data")
    ]


def test_the_verifier_catches_the_wrong_figure_and_the_run_ends_with_the_right_one(
    operator, no_enqueue
):
    run = launch_default("revenue-check", operator)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    run.refresh_from_db()
    revenue, orders = true_total()
    assert json.loads(run.output) == {"revenue": revenue, "orders": orders}
    assert checks(run) == [
        (Step.Kind.GUARD, False),  # "Total revenue is …": not JSON
        (Step.Kind.GUARD, True),
        (Step.Kind.VERIFY, False),  # delivered orders only
        (Step.Kind.GUARD, True),
        (Step.Kind.VERIFY, True),
    ]
    caught = run.steps.filter(kind=Step.Kind.VERIFY).order_by("seq").first()
    assert caught.data["tool"] == "run_query" and caught.data["args"] == {"sql": TOTAL_REVENUE_SQL}
    assert caught.data["reason"].startswith(f"recomputed over all {orders} orders")
    view = step_view(caught)
    assert view.title == "verification failed: revenue recomputed" and view.error
    assert ("then", "sent back to the agent") in view.facts
    assert run.agent_config["output_schema"]["required"] == ["revenue", "orders"]
    assert run.agent_config["verifier"]["tool"] == "run_query"


def test_the_run_page_shows_the_checks_as_steps(operator, no_enqueue, client):
    run = launch_default("revenue-check", operator)
    engine.advance(run.pk, time_slice=30)
    client.force_login(operator)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert page.count('data-kind="guard"') == 3 and page.count('data-kind="verify"') == 2
    assert "guard: final answer invalid" in page
    assert "verification failed: revenue recomputed" in page


def test_a_verified_run_replays_identically(operator, no_enqueue):
    run = launch_default("revenue-check", operator)
    engine.advance(run.pk, time_slice=30)
    run.refresh_from_db()
    result = replay(run)
    assert result.identical, result.summary
    assert result.compared == run.last_seq
    assert "verify revenue recomputed 1 failed" in result.recorded


def test_the_default_question_is_valid_input():
    agent = get_agent("revenue-check")
    assert agent.validate_input({"question": "Total revenue?"})[1] == {}
