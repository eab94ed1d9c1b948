"""The input summary that tells runs apart, and relative times as people say them."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from agentkit.agents import SUMMARY_CHARS, get_agent
from runs import engine
from runs.templatetags.run_tags import ago

pytestmark = pytest.mark.django_db


def test_the_default_summary_is_the_first_fields_of_the_input():
    agent = get_agent("sql-analyst")
    summary = agent.summarize({"question": "Revenue?", "report_to": "boss@example.com"})
    assert summary == "question Revenue? · report to boss@example.com"


def test_an_agent_declares_its_own_summary():
    agent = get_agent("refund-desk")
    assert agent.summarize({"order_id": 42, "amount": "600.00", "reason": "x"}) == (
        "order 42 · refund 600.00"
    )
    assert agent.summarize({"order_id": 42, "amount": None, "reason": "x"}) == (
        "order 42 · full refund"
    )


def test_a_summary_is_one_short_line_and_a_broken_one_falls_back():
    agent = replace(get_agent("sql-analyst"), summary=lambda d: d["missing"])
    summary = agent.summarize({"question": "a\nb\r\n" + "x" * 500, "report_to": "b@example.com"})
    assert "\n" not in summary and len(summary) == SUMMARY_CHARS
    assert summary.startswith("question a b xxx") and summary.endswith("…")


def test_the_summary_is_stored_at_launch_and_not_in_the_snapshot(operator, no_enqueue):
    agent = get_agent("refund-desk")
    data, _ = agent.validate_input({"order_id": 42, "amount": "600", "reason": "x"})
    run = engine.launch(agent=agent, input=data, launched_by=operator, provider="scripted")
    run.refresh_from_db()
    assert run.input_summary == "order 42 · refund 600"
    assert "summary" not in run.agent_config


@pytest.mark.parametrize(
    ("seconds", "said"),
    [
        (3, "just now"),
        (44, "just now"),
        (120, "2 min ago"),
        (59 * 60, "59 min ago"),
        (3 * 3600, "3 h ago"),
        (30 * 3600, "yesterday"),
        (5 * 86400, "5 days ago"),
        (90 * 86400, "2026-01-31"),
    ],
)
def test_relative_times_read_naturally(seconds, said):
    now = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    assert ago(now - timedelta(seconds=seconds), now) == said
    assert ago(None) == ""


def test_cancel_asks_for_confirmation(client, operator, no_enqueue):
    from .factories import make_run

    run = make_run(operator)
    client.force_login(operator)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="cancel-run"' in html and 'hx-confirm="Cancel this run?' in html
