"""Triggers racing: two requests with one Idempotency-Key, two sweepers on one slot.

Each thread has its own database connection. On PostgreSQL the transactions truly overlap
(the unique constraint and SELECT … FOR UPDATE SKIP LOCKED decide); on SQLite they queue on
the write lock, and the second must still find the first's work. The launch is slowed down so
that the second racer arrives while the first still holds its transaction open.
"""

from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client

from runs.models import Run
from tests.support import races
from tests.support.races import slow_down_launches
from triggers import scheduler
from triggers.models import Schedule, WebhookDelivery, WebhookSecret

from .conftest import AGENT, INPUT, post_hook

# Not marked `postgres`: they hold on SQLite too, and run there as well.
pytestmark = pytest.mark.django_db(transaction=True)

RACERS = 4


@pytest.fixture
def slow_launch(monkeypatch):
    slow_down_launches(monkeypatch, 0.3)


def race(target) -> list:
    return races.race(target, RACERS, within=60)


def test_requests_racing_with_one_key_launch_one_run(no_enqueue, slow_launch):
    secret = WebhookSecret.objects.create(agent=AGENT)
    responses = race(
        lambda: post_hook(Client(), {"input": INPUT}, secret=secret.secret, key="evt_race")
    )
    assert sorted(r.status_code for r in responses) == [200] * (RACERS - 1) + [201]
    assert len({r.json()["id"] for r in responses}) == 1
    assert Run.objects.count() == WebhookDelivery.objects.count() == 1
    assert str(Run.objects.get().pk) == responses[0].json()["id"]


def test_sweepers_racing_on_one_slot_launch_one_run(no_enqueue, slow_launch):
    slot = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
    schedule = Schedule.objects.create(
        name="racy", agent=AGENT, input=INPUT, interval_seconds=3600, next_run_at=slot
    )
    now = slot + timedelta(seconds=5)
    launched = race(lambda: scheduler.launch_due_schedules(now))
    assert sorted(launched) == [0] * (RACERS - 1) + [1]
    run = Run.objects.get()
    schedule.refresh_from_db()
    assert schedule.last_run == run
    assert schedule.next_run_at == slot + timedelta(hours=1)
    assert schedule.last_skip_reason == ""  # the losers skipped the slot silently
