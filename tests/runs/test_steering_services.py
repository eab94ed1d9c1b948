"""Steering with the services: a real Celery worker (Redis broker) on Postgres. A pause
asked while the worker runs the run is taken at a step boundary and frees the worker; an
instruction sent while it is paused reaches the model once after Resume; a dispatch that
failed waits without a worker until an operator's edited retry, which the worker runs."""

import time

import pytest
from django.conf import settings

from agentkit.agents import get_agent
from runs import engine
from runs.models import Instruction, Recovery, Run, Step
from runs.steering import models as steering
from tests.conftest import on_postgres

from .harness import assert_timeline_sound
from .worker_processes import celery_worker, stop

pytestmark = [
    pytest.mark.django_db(transaction=True),
    on_postgres,
    pytest.mark.skipif(
        not settings.REDIS_URL, reason="needs REDIS_URL (a broker other processes see)"
    ),
]


def wait_for(run: Run, done, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        run.refresh_from_db()
        if done(run):
            return
        assert time.monotonic() < deadline, f"run still {run.status}: {run.status_detail}"
        time.sleep(0.1)


@pytest.fixture
def worker():
    from agentops.celery import app

    app.control.purge()
    process = celery_worker("steer", concurrency=2)
    yield process
    stop(process)


def test_pause_instruct_resume_with_a_real_worker(test_agent, plain_user, worker):
    run = engine.launch(
        agent=test_agent, input={"task": "sleep", "script": "slow_steps"}, provider="scripted"
    )
    wait_for(run, lambda r: r.step_count >= 2)
    assert steering.request_pause(run, by=plain_user)
    wait_for(run, lambda r: r.is_paused)
    assert not run.lease_owner  # the worker is free
    steps_when_paused = run.last_seq
    steering.instruct(run, text="use the EU warehouse", key="svc-1", by=plain_user)
    time.sleep(1.5)  # a paused run does not move
    run.refresh_from_db()
    assert run.last_seq == steps_when_paused and run.is_paused
    assert steering.resume(run, by=plain_user) == "resumed"
    wait_for(run, lambda r: r.is_terminal)
    assert run.status == Run.Status.SUCCEEDED
    delivered = run.steps.get(kind=Step.Kind.OPERATOR)
    assert delivered.seq > steps_when_paused and delivered.data["text"] == "use the EU warehouse"
    assert Instruction.objects.get(run=run).delivered_seq == delivered.seq
    assert run.steps.filter(kind=Step.Kind.STATUS, data__event="paused").count() == 1
    assert_timeline_sound(run)


def test_a_guided_retry_with_a_real_worker(plain_user, worker):
    agent = get_agent("dispatch-desk")
    run = engine.launch(agent=agent, input={"order_id": 13}, provider="scripted")
    wait_for(run, lambda r: r.status == Run.Status.WAITING)
    assert not run.lease_owner
    recovery = Recovery.objects.get(run=run, status=Recovery.Status.OPEN)
    choice = steering.Choice("retry", args={"order_id": 13, "warehouse": "EU-WEST"})
    steering.choose(run, choice, by=plain_user)
    wait_for(run, lambda r: r.is_terminal)
    assert run.status == Run.Status.SUCCEEDED and "D-13-EU-WEST" in run.output
    recovery.refresh_from_db()
    assert recovery.decided_by == plain_user
    assert_timeline_sound(run)
