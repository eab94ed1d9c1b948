"""Rate limits on actions: counted in the database across runs and workers, only for calls
that run, once per call; past one a call fails visibly or its run waits without a worker."""

import dataclasses
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agentkit.agents import CATALOGUE, GateRules, register
from agentkit.llm.scripted import text, tool_use
from agentkit.tools import Blast, RateLimit, tool
from runs import engine, rate_limits
from runs.engine.rate_limited import Scope, reserve
from runs.models import RateLimitUse, RateLimitWait, Run, Step
from runs.rendering import step_view

from .. import harness
from .test_race import race

HOUR = timedelta(hours=1)


@tool(
    reversible=False,
    blast=Blast.LOW,
    name="t_mail_fail",
    rate_limit=RateLimit(2, per=HOUR, on_limit="fail"),
)
def t_mail_fail(to: str) -> dict:
    """Sends a (test) e-mail; at most 2 an hour across all runs, refused past it."""
    harness._count("t_mail_fail")
    return {"sent": to}


@tool(reversible=False, blast=Blast.LOW, name="t_mail_wait", rate_limit=RateLimit(1, per=HOUR))
def t_mail_wait(to: str) -> dict:
    """Sends a (test) e-mail; at most 1 an hour across all runs, waits past it."""
    harness._count("t_mail_wait")
    return {"sent": to}


LIMITED = ("t_mail_fail", "t_mail_wait")


@pytest.fixture
def start(test_agent, no_enqueue, script):
    """Launch and drive a run of the test agent (with the limited tools) on these turns."""

    def make(turns: list, **agent_changes) -> Run:
        script(turns)
        agent = dataclasses.replace(test_agent, tools=test_agent.tools + LIMITED, **agent_changes)
        run = engine.launch(agent=agent, input={"task": "t", "script": ""}, provider="scripted")
        engine.advance(run.pk, time_slice=30)
        run.refresh_from_db()
        return run

    return make


def guards(run: Run) -> list[dict]:
    steps = run.steps.filter(kind=Step.Kind.GUARD).order_by("seq")
    return list(steps.values_list("data", flat=True))


@pytest.mark.django_db
def test_past_a_fail_limit_the_call_is_refused_and_the_model_told_the_limit(start):
    run = start(
        [[tool_use("t_mail_fail", to=f"c{i}@example.com")] for i in range(3)] + [[text("ok")]]
    )
    assert run.status == Run.Status.SUCCEEDED
    assert harness.CALLS["t_mail_fail"] == 2
    refused = harness.tool_steps(run, "t_mail_fail")[2]
    assert refused["is_error"]
    assert refused["error"].startswith(
        "rate limit reached, not run: t_mail_fail: at most 2 per hour across all runs; "
        "the next slot opens at "
    )
    (guard,) = guards(run)
    assert guard["action"] == "fail" and guard["scope"] == "tool:t_mail_fail"
    # Only the calls that ran count.
    assert RateLimitUse.objects.filter(scope="tool:t_mail_fail").count() == 2


@pytest.mark.django_db
def test_a_tool_limit_holds_across_runs_and_an_agent_limit_across_its_runs(start):
    first = start([[tool_use("t_mail_fail", to="a@example.com")], [text("ok")]])
    assert harness.CALLS["t_mail_fail"] == 1 and not guards(first)
    second = start(
        [
            [tool_use("t_mail_fail", to="b@example.com")],
            [tool_use("t_mail_fail", to="c@example.com")],
            [text("ok")],
        ]
    )
    assert harness.CALLS["t_mail_fail"] == 2
    assert [g["scope"] for g in guards(second)] == ["tool:t_mail_fail"]
    # The agent's own, tighter limit on a tool: one charge per hour for this agent.
    limited = {"t_charge": RateLimit(1, per=HOUR, on_limit="fail")}
    start([[tool_use("t_charge", amount=1)], [text("ok")]], rate_limits=limited)
    run = start([[tool_use("t_charge", amount=2)], [text("ok")]], rate_limits=limited)
    (guard,) = guards(run)
    assert guard["scope"] == f"agent:{harness.AGENT}:t_charge"
    assert "across all runs of engine-test" in harness.tool_steps(run, "t_charge")[0]["error"]
    assert harness.CALLS["t_charge"] == 1


@pytest.mark.django_db
def test_past_a_wait_limit_the_run_waits_without_a_worker_then_runs_the_call(start):
    start([[tool_use("t_mail_wait", to="a@example.com")], [text("ok")]])
    first_use = RateLimitUse.objects.get(scope="tool:t_mail_wait").at
    run = start([[tool_use("t_mail_wait", to="b@example.com")], [text("sent")]])
    assert run.status == Run.Status.WAITING and run.lease_owner == ""
    wait = RateLimitWait.objects.get(run=run)
    assert wait.until == first_use + HOUR
    assert run.status_detail == (
        f"rate limit of t_mail_wait: resumes at {wait.until:%Y-%m-%d %H:%M:%S} UTC"
    )
    (guard,) = guards(run)
    assert guard["action"] == "wait" and guard["retry_at"] == wait.until.isoformat()
    paused = run.steps.filter(kind=Step.Kind.STATUS, data__event="paused").get()
    assert paused.data["reason"] == "rate limit"
    # Not before its time.
    assert rate_limits.sweep() == 0
    harness.CLOCK.skew = HOUR + timedelta(seconds=1)
    assert rate_limits.sweep() == 1
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED and not RateLimitWait.objects.exists()
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    assert harness.CALLS["t_mail_wait"] == 2
    # The refused attempt counted for nothing; the call that ran, once.
    assert RateLimitUse.objects.filter(scope="tool:t_mail_wait").count() == 1
    # Time waiting for the window is not working time.
    run.refresh_from_db()
    assert run.waiting_seconds >= HOUR.total_seconds()


@pytest.mark.django_db
def test_a_call_seen_again_under_its_key_counts_once(test_agent):
    scope = Scope("tool:x", 1, HOUR, "fail", "x")
    assert reserve([scope], key="k1", run_id=None, tool="x") is None
    # The same call again (resumed after a crash before its record): still admitted, once.
    assert reserve([scope], key="k1", run_id=None, tool="x") is None
    assert RateLimitUse.objects.count() == 1
    refused = reserve([scope], key="k2", run_id=None, tool="x")
    assert refused is not None and refused.scope == scope


@pytest.mark.django_db
def test_a_sliding_window_has_room_only_as_uses_age_out(test_agent):
    scope = Scope("tool:x", 2, HOUR, "fail", "x")
    now = harness.CLOCK.now()
    assert reserve([scope], key="a", run_id=None, tool="x", now=now) is None
    half = timedelta(minutes=30)
    assert reserve([scope], key="b", run_id=None, tool="x", now=now + half) is None
    refused = reserve([scope], key="c", run_id=None, tool="x", now=now + half)
    assert refused.retry_at == now + HOUR  # when the first use ages out
    # Then one slot is free, not two: no burst at a window's boundary.
    assert reserve([scope], key="c", run_id=None, tool="x", now=now + HOUR) is None
    refused = reserve([scope], key="d", run_id=None, tool="x", now=now + HOUR)
    assert refused.retry_at == now + half + HOUR


@pytest.mark.django_db
def test_tools_without_a_limit_cost_no_query(start):
    with CaptureQueriesContext(connection) as queries:
        run = start([[tool_use("t_charge", amount=1)], [text("ok")]])
    assert run.status == Run.Status.SUCCEEDED
    assert not [q for q in queries.captured_queries if "ratelimit" in q["sql"].lower()]


@pytest.mark.django_db(transaction=True)
def test_racing_workers_never_exceed_the_limit(test_agent):
    """Eight threads, each its own connection (true concurrency on Postgres, the write lock
    on SQLite), each reserving 5 calls of a limit of 12: exactly 12 are admitted."""
    scope = Scope("tool:race", 12, HOUR, "fail", "race")

    def worker(i: int) -> int:
        admitted = 0
        for n in range(5):
            if reserve([scope], key=f"{i}-{n}", run_id=None, tool="race") is None:
                admitted += 1
        return admitted

    results = race(8, worker)
    assert sum(results) == 12
    assert RateLimitUse.objects.filter(scope="tool:race").count() == 12


@pytest.mark.django_db(transaction=True)
def test_runs_racing_through_the_engine_never_exceed_a_limit(test_agent, no_enqueue):
    """Six runs, each on its own worker thread, each sending one e-mail under a limit of two
    an hour: two are sent, four refused with the limit, on SQLite and on Postgres."""
    agent = register(
        dataclasses.replace(
            test_agent,
            slug="rate-race",
            tools=("t_mail_fail",),
            gates=GateRules(),  # the test agent's name tools this one does not have
            script=lambda d: [
                [tool_use("t_mail_fail", to=f"{d['task']}@example.com")],
                [text("done")],
            ],
        )
    )
    try:
        runs = [
            engine.launch(agent=agent, input={"task": f"c{i}", "script": ""}, provider="scripted")
            for i in range(6)
        ]
        race(6, lambda i: engine.advance(runs[i].pk, time_slice=30))
        assert harness.CALLS["t_mail_fail"] == 2
        refused = Step.objects.filter(kind=Step.Kind.GUARD, data__action="fail").count()
        assert refused == 4
        assert RateLimitUse.objects.filter(scope="tool:t_mail_fail").count() == 2
        assert set(Run.objects.values_list("status", flat=True)) == {Run.Status.SUCCEEDED}
    finally:
        CATALOGUE.pop("rate-race", None)


@pytest.mark.django_db
def test_the_trace_says_which_limit_and_when_the_next_slot_opens(start):
    start([[tool_use("t_mail_wait", to="a@example.com")], [text("ok")]])
    run = start([[tool_use("t_mail_wait", to="b@example.com")], [text("ok")]])
    view = step_view(run.steps.get(kind=Step.Kind.GUARD))
    until = RateLimitWait.objects.get(run=run).until
    assert view.title == "rate limit: t_mail_wait waits"
    assert dict(view.facts) == {
        "limit": "t_mail_wait: at most 1 per hour across all runs",
        "scope": "tool:t_mail_wait",
        "next slot": f"{until:%Y-%m-%d %H:%M:%S} UTC",
    }
