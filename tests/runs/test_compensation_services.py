"""Compensation with the services: Postgres and a real Celery worker (Redis broker). Two
operators pressing Compensate at once ask once (the origin's row lock orders them; the
partial unique index holds it); the worker runs the compensation run to its gate, then the
approved reversal through the ledger, and the settlement task it is sent records the
compensation on the failed run."""

import threading

import pytest
from django.conf import settings
from django.db import connection

from approvals import decisions
from approvals.models import Approval
from demo.models import Refund
from runs.compensation import effects as compensable
from runs.compensation import models as compensation
from runs.models import Compensation, Run, Step
from tests.conftest import on_postgres

from ..demo.test_exchange_desk import failed_after_refund
from .test_steering_services import wait_for
from .worker_processes import celery_worker, stop

pytestmark = [
    pytest.mark.django_db(transaction=True),
    on_postgres,
    pytest.mark.skipif(
        not settings.REDIS_URL, reason="needs REDIS_URL (a broker other processes see)"
    ),
]


def test_two_presses_at_once_ask_once_and_the_worker_compensates(
    operator, approver, no_enqueue, admin_user
):
    run = failed_after_refund("exchange-desk", operator, approver)
    outcomes: list[str] = []
    barrier = threading.Barrier(2)

    def press(user) -> None:
        barrier.wait()
        try:
            compensation.request(run, None, by=user)
            outcomes.append("asked")
        except compensation.CompensationError as exc:
            outcomes.append(f"{exc.status}")
        finally:
            connection.close()

    threads = [threading.Thread(target=press, args=(u,)) for u in (operator, admin_user)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(outcomes) == ["409", "asked"]
    assert Compensation.objects.filter(run=run).count() == 1
    assert Run.objects.filter(trigger=Run.Trigger.COMPENSATION).count() == 1


def test_a_real_worker_runs_the_compensation_and_settles_it(operator, approver, monkeypatch):
    # The failed run is made inline; the compensation then goes through the broker.
    monkeypatch.setattr("runs.queue.enqueue", lambda run_id, **how: None)
    run = failed_after_refund("exchange-desk", operator, approver)
    monkeypatch.undo()

    from agentops.celery import app

    app.control.purge()
    process = celery_worker("compensate", concurrency=2)
    try:
        [comp] = compensation.request(run, None, by=operator)
        child = comp.compensating_run
        wait_for(child, lambda r: r.status == Run.Status.WAITING)
        gate = Approval.objects.get(run=child, status=Approval.Status.PENDING)
        assert gate.tool == "reverse_refund"
        decisions.decide(gate.pk, user=approver, decision="approve")
        wait_for(child, lambda r: r.status == Run.Status.SUCCEEDED)
        wait_for(
            run,
            lambda r: r.steps.filter(
                kind=Step.Kind.OPERATOR, data__event=compensation.SETTLED
            ).exists(),
        )
    finally:
        stop(process)
    comp.refresh_from_db()
    assert comp.status == Compensation.Status.COMPENSATED
    assert Refund.objects.get(run_id=run.pk).reversed_at is not None
    assert compensable.effects(run)[0].state == "compensated"
    run.refresh_from_db()
    assert run.verify_chain() == (True, None)
