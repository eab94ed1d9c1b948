"""The loop heals itself: lost wake-ups, lost task messages and the embedded mode's sweeps.

The embedded topology (`manage.py up`) runs what celery beat schedules in production as a
thread (agentops/embedded.py): these call one sweep directly instead of waiting for it.
"""

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from agentops import embedded
from approvals import decisions
from approvals.models import Approval
from runs.models import Run, Step

from .conftest import gated, launch

pytestmark = pytest.mark.django_db(transaction=True)

BIG = {"to": "acme", "amount": "800.00"}  # over the 500 threshold: gated


def _age(run: Run, seconds: float) -> None:
    Run.objects.filter(pk=run.pk).update(updated_at=timezone.now() - timedelta(seconds=seconds))


def test_a_resume_of_a_running_run_is_a_no_op(operator, no_enqueue):
    run = launch("test-payer", BIG, by=operator)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING)
    steps = run.steps.count()
    with transaction.atomic():
        assert not Run.locked(run.pk).resume("all decisions made")
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING and run.steps.count() == steps
    assert no_enqueue == [str(run.pk)]  # only the launch's


def test_two_decisions_on_a_run_give_exactly_one_resume(operator, approver, no_enqueue):
    run, first = gated("test-payer", BIG, by=operator)
    decisions.decide(first.pk, user=approver, decision="approve")
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED
    # A second decision (a replay, or a late click) finds nothing to resume.
    with pytest.raises(decisions.DecisionConflict):
        decisions.decide(first.pk, user=approver, decision="approve")
    resumed = run.steps.filter(kind=Step.Kind.STATUS, data__event="resumed")
    assert resumed.count() == 1
    assert no_enqueue.count(str(run.pk)) == 2  # the launch, the one resume


def test_a_committed_decision_whose_resume_was_never_sent_is_swept(operator, approver, monkeypatch):
    """The web process died between committing the decision and enqueueing the resume."""
    sent = []
    monkeypatch.setattr("runs.queue.enqueue", lambda run_id, **how: None)
    run, approval = gated("test-payer", BIG, by=operator)
    decisions.decide(approval.pk, user=approver, decision="approve")  # its enqueue is lost
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED
    monkeypatch.setattr("runs.queue.enqueue", lambda run_id, **how: sent.append(run_id))
    embedded.Sweeps(interval=60).sweep_once()
    assert sent == []  # not yet stale: its message may still be on its way
    _age(run, 61)
    embedded.Sweeps(interval=60).sweep_once()
    assert [str(r) for r in sent] == [str(run.pk)]


def test_the_embedded_sweep_expires_approvals(operator, no_enqueue):
    run, approval = gated("test-payer", BIG, by=operator)
    Approval.objects.filter(pk=approval.pk).update(expires_at=timezone.now())
    embedded.Sweeps(interval=60).sweep_once()
    approval.refresh_from_db()
    run.refresh_from_db()
    assert approval.status == Approval.Status.EXPIRED
    assert run.status == Run.Status.QUEUED  # resumed: the agent is told it expired


def test_the_embedded_sweep_survives_an_error_and_sweeps_next_time(
    operator, no_enqueue, monkeypatch
):
    run = launch("test-payer", BIG, by=operator)
    _age(run, 61)
    failing = [True]
    real_sweep = embedded.engine.sweep

    def sweep_once_failing():
        if failing.pop() if failing else False:
            raise RuntimeError("server closed the connection unexpectedly")
        return real_sweep()

    monkeypatch.setattr(embedded.engine, "sweep", sweep_once_failing)
    sweeps = embedded.Sweeps(interval=60)
    no_enqueue.clear()
    sweeps.sweep_once()  # logged, not raised: the thread keeps its schedule
    assert no_enqueue == []
    sweeps.sweep_once()
    assert no_enqueue == [str(run.pk)]


def test_lost_messages_of_queued_runs_are_recovered_at_start(operator, no_enqueue):
    """The memory transport's queue died with the previous process."""
    queued = launch("test-payer", BIG, by=operator)
    running = launch("test-payer", BIG, by=operator)
    Run.objects.filter(pk=running.pk).update(status=Run.Status.RUNNING)
    no_enqueue.clear()
    assert embedded.recover_lost_messages() == 1
    assert no_enqueue == [str(queued.pk)]
