"""A broker outage after the run's state is committed: the caller gets its answer (201 on a
launch, 200 on a decision), never a 500 for something that did happen, and the sweep re-sends
the queued run once the broker is back."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from kombu.exceptions import OperationalError

from accounts.models import ApiToken
from approvals.models import Approval
from runs import engine
from runs.models import Run
from runs.tasks import advance_run
from tests.approvals.conftest import gated
from tests.conftest import make_user

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def broker(monkeypatch):
    """The broker as the web process sees it: `sent` collects run ids; `down` refuses like
    kombu does when Redis does not answer."""

    class Broker:
        down = False
        sent: list[str] = []

    def apply_async(args=(), countdown=None, **kwargs):
        if Broker.down:
            raise OperationalError("Error 111 connecting to 127.0.0.1:6390. Connection refused.")
        Broker.sent.append(args[0])

    Broker.sent = []
    monkeypatch.setattr(advance_run, "apply_async", apply_async)
    return Broker


def bearer(django_user_model, name: str, role: str) -> Client:
    _, raw = ApiToken.issue(make_user(django_user_model, name, role), "tests")
    return Client(headers={"Authorization": f"Bearer {raw}"})


def test_a_launch_is_accepted_while_the_broker_is_down_and_the_sweep_sends_it_later(
    broker, django_user_model
):
    client = bearer(django_user_model, "ops", "operator")
    broker.down = True

    response = client.post(
        "/api/runs",
        {"agent": "refund-desk", "input": {"order_id": 42, "reason": "damaged"}},
        content_type="application/json",
    )

    assert response.status_code == 201, response.content
    run = Run.objects.get(pk=response.json()["id"])
    assert run.status == Run.Status.QUEUED
    assert broker.sent == []

    broker.down = False
    assert engine.sweep(now=timezone.now() + timedelta(seconds=61)) == 1
    assert broker.sent == [str(run.pk)]


def test_a_decision_is_answered_while_the_broker_is_down_and_the_run_stays_queued(
    broker, django_user_model
):
    run, approval = gated("test-payer", {"to": "acme", "amount": "800.00"})
    client = bearer(django_user_model, "boss", "approver")
    broker.down = True

    response = client.post(
        f"/api/approvals/{approval.pk}/decision",
        {"decision": "approve"},
        content_type="application/json",
    )

    assert response.status_code == 200, response.content
    assert response.json()["status"] == Approval.Status.APPROVED
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED

    broker.down = False
    sent_before = len(broker.sent)
    assert engine.sweep(now=timezone.now() + timedelta(seconds=61)) == 1
    assert broker.sent[sent_before:] == [str(run.pk)]
