"""Live events carry their step and run (runs/events.py); the web process renders them from
that data (runs/live.py) exactly as it renders them from the database."""

from datetime import datetime, timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from agentkit.agents import get_agent
from approvals import decisions
from approvals.models import Approval
from runs import engine, events, live, rendering
from runs.models import Run, Step

from .factories import make_run

# Transactional: events are published on commit.
pytestmark = pytest.mark.django_db(transaction=True)

HEADER = '<section id="run-header"'


class Published(list):
    """Every event handed to the sender, with its data as it would be sent to a listening
    group (serialised when read, as the sender does when it sends)."""

    def events(self) -> list[tuple[str, dict]]:
        return [(group, events._completed(message, later)) for group, message, later in self]


@pytest.fixture
def published(monkeypatch) -> Published:
    sent = Published()

    def send(group, message, *, merge_key=None, later=None):
        sent.append((group, message, later))

    monkeypatch.setattr(events, "send", send)
    return sent


def sql_analyst(user, report_to: str) -> Run:
    agent = get_agent("sql-analyst")
    data, errors = agent.validate_input({"question": "Revenue?", "report_to": report_to})
    assert not errors
    run = engine.launch(agent=agent, input=data, launched_by=user, provider="scripted")
    engine.advance(run.pk, time_slice=30)
    return run


def frozen_clock(monkeypatch) -> None:
    # The header's time gauge counts up to now: both renders must see the same now.
    now = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: now)


def assert_rendered_as_from_the_database(published: Published) -> None:
    sent = published.events()
    steps = [m for _, m in sent if m["type"] == "run.step"]
    rows = [m for _, m in sent if m["type"] == "run.changed"]
    assert steps and rows
    assert all("step" in m and "run" in m for m in steps)
    assert all("run" in m and "step" not in m for m in rows)
    for event in steps:
        step = Step.objects.get(run_id=event["run_id"], seq=event["seq"])
        pushed = live._step_html(event)["html"]
        stored = rendering.render_step_event(step, with_header=False)["html"]
        assert pushed.split(HEADER)[0].rstrip() == stored, event["seq"]
    for run_id in {m["run_id"] for m in steps}:
        # The newest event's run is the run as it was stored last.
        last = [m for m in steps if m["run_id"] == run_id][-1]
        run = Run.objects.select_related("launched_by").get(pk=run_id)
        assert run.last_seq == last["seq"]
        pushed = live._step_html(last)["html"]
        stored = rendering.render_step_event(Step.objects.get(run=run, seq=run.last_seq), run)
        assert pushed == stored["html"]
        assert HEADER in pushed
        last_row = [m for m in rows if m["run_id"] == run_id][-1]
        for launched in (True, False):
            assert live._run_html(last_row, launched) == rendering.render_run_event(run, launched)


def test_a_waiting_run_renders_from_its_events_as_from_the_database(
    published, operator, no_enqueue, monkeypatch
):
    run = sql_analyst(operator, "boss@example.com")  # off the allow-list: gated
    run.refresh_from_db()
    assert run.status == Run.Status.WAITING
    frozen_clock(monkeypatch)
    assert_rendered_as_from_the_database(published)


def test_a_gated_decided_and_finished_run_renders_the_same(
    published, operator, approver, no_enqueue, monkeypatch
):
    run = sql_analyst(operator, "boss@example.com")
    approval = Approval.objects.get(run=run)
    decisions.decide(approval.pk, user=approver, decision="approve")
    engine.advance(run.pk, time_slice=30)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED and run.output
    kinds = {m.get("kind") for _, m, _ in published}
    assert {"status", "llm", "tool", "gate", "decision"} <= kinds
    frozen_clock(monkeypatch)
    assert_rendered_as_from_the_database(published)


def test_a_cancelled_run_without_a_launcher_renders_the_same(published, no_enqueue, monkeypatch):
    run = make_run(None)
    run.cancel(reason="not needed <b>any more</b>")
    frozen_clock(monkeypatch)
    assert_rendered_as_from_the_database(published)


def test_a_run_row_still_shows_who_launched_it(published, operator, no_enqueue):
    make_run(operator, status=Run.Status.RUNNING)
    (event,) = [m for _, m in published.events() if m["type"] == "run.changed"]
    assert event["run"]["launched_by"] == "olivia"
    assert "olivia" in "".join(live._run_html(event, launched=True)["html"])


def test_an_event_without_its_data_is_rendered_from_the_database(
    published, operator, no_enqueue, django_assert_num_queries
):
    run = make_run(operator, status=Run.Status.RUNNING)
    (event,) = [m for _, m in published.events() if m["type"] == "run.step"]
    with django_assert_num_queries(0):
        from_data = live._step_html(event)
    with django_assert_num_queries(2):
        from_db = live._step_html(live.summary(event))
    assert from_data["html"].split(HEADER)[0] == from_db["html"].split(HEADER)[0]
    assert live.summary(event) == {
        "type": "run.step",
        "run_id": str(run.pk),
        "seq": 1,
        "kind": "status",
    }


def test_the_run_is_copied_when_its_step_commits(published, operator, no_enqueue):
    # The engine keeps changing its run object after the step is published.
    run = make_run(operator)
    with transaction.atomic():
        locked = Run.locked(run.pk)
        locked.transition_to(Run.Status.RUNNING, started_at=timezone.now())
        locked.append_step(
            Step.Kind.STATUS, {"event": "started", "from": "queued", "to": "running"}
        )
    # Nothing serialised yet: the outbox does it only if the event is sent.
    locked.status = Run.Status.FAILED
    locked.started_at += timedelta(hours=1)
    _, event = published.events()[-1]
    assert event["run"]["status"] == "running"
    started_at = datetime.fromisoformat(event["run"]["started_at"])
    assert started_at == locked.started_at - timedelta(hours=1)


@pytest.mark.asyncio
async def test_an_event_with_its_data_renders_on_the_loop_without_the_database_thread(
    published, operator, no_enqueue, monkeypatch
):
    # A render that needs no database read stays on the loop: no hop to a thread at all.
    from asgiref.sync import sync_to_async

    await sync_to_async(make_run)(operator, status=Run.Status.RUNNING)
    (event,) = [m for _, m in await sync_to_async(published.events)() if m["type"] == "run.step"]

    def no_thread(*args, **kwargs):
        raise AssertionError("rendered in the database thread")

    monkeypatch.setattr(live, "any_thread", no_thread)
    payload = await live.step_payload(event)
    assert 'data-seq="1"' in payload["html"]


@pytest.mark.asyncio
async def test_a_render_from_data_that_reads_the_database_still_renders(operator):
    def reads_the_database() -> dict:
        return {"html": str(Run.objects.count())}

    assert await live.cache.get(("test", 1), reads_the_database, inline=True) == {"html": "0"}
