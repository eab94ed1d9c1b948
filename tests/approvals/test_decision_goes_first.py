"""A run resumed by a decision is sent to the people queue, ahead of any backlog of runs
(runs/queue.py); its launch went to its agent's run queue."""

import pytest

from approvals import decisions
from runs import queue

from .conftest import gated

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sent(monkeypatch) -> list[tuple[str, bool]]:
    calls: list[tuple[str, bool]] = []
    monkeypatch.setattr(
        queue,
        "enqueue",
        lambda run_id, for_a_person=False, **how: calls.append((str(run_id), for_a_person)),
    )
    return calls


def test_a_decided_run_goes_to_the_people_queue(operator, approver, sent):
    run, approval = gated("test-payer", {"to": "acme", "amount": "800.00"}, by=operator)
    assert sent == [(str(run.pk), False)]  # the launch: a run queue
    decisions.decide(approval.pk, user=approver, decision="approve")
    assert sent[-1] == (str(run.pk), True)


def test_a_rejection_resumes_through_the_people_queue_too(operator, approver, sent):
    run, approval = gated("test-payer", {"to": "acme", "amount": "800.00"}, by=operator)
    decisions.decide(approval.pk, user=approver, decision="reject", reason="not this month")
    assert sent[-1] == (str(run.pk), True)
