"""An external session's limits are applied as the engine's terminator applies an internal
run's: before a call it may not make, the session ends (failed, with the reason), and the
call is refused. A step is a call; cost is what the agent reports; time is working time."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from approvals.models import Approval
from gateway.models import ExternalAgent
from runs.costs import cost_by_agent
from runs.models import Run, Step

from .conftest import AgentClient, make_agent


def _bot(limits: dict) -> AgentClient:
    agent, token = make_agent()
    agent.limits = limits
    agent.save()
    return AgentClient(token)


def _refused_and_ended(response, session: str, reason: str) -> Run:
    assert response.status_code == 409, response.content
    assert "the session was stopped" in response.json()["detail"]
    run = Run.objects.get(pk=session)
    assert (run.status, run.termination_reason) == ("failed", reason)
    last = run.steps.order_by("-seq").first()
    assert (last.data["event"], last.data["reason"]) == ("terminated", reason)
    assert run.verify_chain() == (True, None)
    return run


def test_each_call_is_a_step_and_max_steps_ends_the_session(db):
    bot = _bot({"max_steps": 3})
    session = bot.session()
    for n in range(3):
        assert bot.call(session, "read_file", {"path": str(n)}).status_code == 200
    assert Run.objects.get(pk=session).step_count == 3
    run = _refused_and_ended(bot.call(session, "read_file", {"path": "4"}), session, "max_steps")
    assert run.status_detail == "3 of 3 steps used"
    assert run.step_count == 3  # the refused call is not counted, nor recorded
    assert bot.call(session, "read_file", {"path": "5"}).status_code == 409


def test_working_time_ends_the_session_but_waiting_for_people_does_not_count(db):
    bot = _bot({"max_seconds": 600})
    session = bot.session()
    # 700 s since it started, 650 of them waiting for a person: 50 s of work.
    Run.objects.filter(pk=session).update(
        started_at=timezone.now() - timedelta(seconds=700), seconds_waited=650
    )
    assert bot.call(session, "read_file", {"path": "a"}).status_code == 200
    # 644 s of work.
    Run.objects.filter(pk=session).update(
        started_at=timezone.now() - timedelta(seconds=694), seconds_waited=50
    )
    run = _refused_and_ended(bot.call(session, "read_file", {"path": "b"}), session, "max_seconds")
    assert run.status_detail.startswith("644s of 600s (not counting 50s")


def test_reported_cost_counts_toward_max_cost(db):
    bot = _bot({"max_cost_usd": "1.00"})
    session = bot.session()
    for _ in range(2):
        call = bot.call(session, "read_file", {"path": "a"}).json()["call"]
        reported = bot.post(f"/calls/{call}/result", {"result": "ok", "cost_usd": "0.55"})
        assert reported.status_code == 200
    assert Run.objects.get(pk=session).cost_usd == Decimal("1.10")
    # On the tool steps' cost too: the agent's spend (and its budget) reads it there.
    steps = Step.objects.filter(run_id=session, kind=Step.Kind.TOOL)
    assert [s.cost_usd for s in steps] == [Decimal("0.55"), Decimal("0.55")]
    spent = cost_by_agent(agent=Run.objects.get(pk=session).agent).total
    assert spent.tool_cost_usd == Decimal("1.10")
    _refused_and_ended(bot.call(session, "read_file", {"path": "a"}), session, "max_cost")
    assert bot.post(f"/calls/{call}/result", {"cost_usd": "-1"}).status_code == 422
    assert bot.post(f"/calls/{call}/result", {"cost_usd": "1e15"}).status_code == 422


def test_consecutive_errors_end_the_session_and_a_success_resets_them(db):
    bot = _bot({"max_consecutive_errors": 2})
    session = bot.session()

    def report(**body):
        call = bot.call(session, "read_file", {"path": "a"}).json()["call"]
        assert bot.post(f"/calls/{call}/result", body).status_code == 200

    report(error="disk full")
    report(result="ok")  # resets
    report(error="disk full")
    report(error="disk full")
    _refused_and_ended(bot.call(session, "read_file", {"path": "a"}), session, "consecutive_errors")


def test_a_session_stopped_by_a_limit_cancels_what_still_waits(db):
    bot = _bot({"max_steps": 1})
    session = bot.session()
    gated = bot.call(session, "delete_branch", {"name": "dev"}).json()
    _refused_and_ended(bot.call(session, "read_file", {"path": "a"}), session, "max_steps")
    assert Approval.objects.get(pk=gated["approval"]).status == "cancelled"
    assert bot.get(f"/calls/{gated['call']}").json()["status"] == "cancelled"


def test_the_runs_page_shows_the_limits_the_session_has(db, client, approver):
    bot = _bot({"max_steps": 500})
    session = bot.session()
    bot.call(session, "read_file", {"path": "a"})
    client.force_login(approver)
    page = client.get(f"/runs/{session}/").content.decode()
    assert "500" in page
    run = Run.objects.get(pk=session)
    assert (run.step_count, run.max_steps) == (1, 500)


@pytest.mark.parametrize(
    "limits",
    [{"max_steps": 0}, {"max_seconds": "600"}, {"max_cost_usd": "lots"}, {"max_turns": 3}, [1]],
)
def test_limits_are_validated(db, limits):
    with pytest.raises(ValidationError, match="limit"):
        ExternalAgent(slug="ok-bot", title="x", limits=limits).full_clean()
