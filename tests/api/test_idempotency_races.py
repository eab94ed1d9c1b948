"""Concurrent requests with one Idempotency-Key: one does the work, none does it twice.

Each thread has its own database connection. On PostgreSQL the transactions truly overlap
(the advisory lock answers the others 409 at once; the unique constraint backs it); on SQLite
they queue on the write lock and the later ones get the first answer. The launch is slowed
down so that the other racers arrive while the first still holds its transaction open.
"""

import threading

import pytest

from agentops.models import IdempotentRequest
from runs.models import Run
from tests.runs.test_api import REFUND, bearer_client, post_json
from tests.support import races
from tests.support.races import slow_down_launches

pytestmark = pytest.mark.django_db(transaction=True)

RACERS = 4
LAUNCH = {"agent": "refund-desk", "input": REFUND}


@pytest.fixture
def slow_launch(monkeypatch):
    slow_down_launches(monkeypatch, 0.5)


def race(target) -> list:
    return races.race(target, RACERS)


def test_launches_racing_with_one_key_make_one_run(operator, no_enqueue, slow_launch):
    clients = [bearer_client(operator) for _ in range(RACERS)]
    pool = iter(clients)
    lock = threading.Lock()

    def one_launch():
        with lock:
            client = next(pool)
        return post_json(client, "/api/runs", LAUNCH, HTTP_IDEMPOTENCY_KEY="race-1")

    responses = race(one_launch)
    codes = sorted(r.status_code for r in responses)
    assert Run.objects.count() == 1, codes
    assert IdempotentRequest.objects.count() == 1
    run_id = str(Run.objects.get().pk)
    created = [r for r in responses if r.status_code == 201]
    # The first is created; each other one got its answer again or was told to retry.
    assert len(created) >= 1 and set(codes) <= {201, 409}, codes
    assert {r.json()["id"] for r in created} == {run_id}
    assert sum("Idempotent-Replayed" not in r for r in created) == 1
    for busy in (r for r in responses if r.status_code == 409):
        assert busy["Retry-After"] == "1" and "in progress" in busy.json()["detail"]
    # Asked again once the first is done: its answer, whatever the racer was told.
    again = post_json(clients[0], "/api/runs", LAUNCH, HTTP_IDEMPOTENCY_KEY="race-1")
    assert again.status_code == 201 and again.json()["id"] == run_id
