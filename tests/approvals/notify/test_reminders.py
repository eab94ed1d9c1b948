"""Reminders before expiry (half-life and 10 % left by default, or the agent's own shares) and
before escalation, through e-mail and webhooks, each sent once however often the sweep runs."""

import json
from datetime import timedelta

import pytest
from django.core import mail

from approvals import decisions, tasks
from approvals.models import Approval, ApprovalReminder
from approvals.notify import reminders
from tests.conftest import make_user

from ..conftest import gated
from .test_notify import SECRET, configure
from .test_notify import endpoint as endpoint  # the fixture, re-exported for this module

pytestmark = pytest.mark.django_db

TRANSFER = {"to": "initech", "amount": "900.00"}  # gated: over the limit, off the allow-list


@pytest.fixture
def bea_with_email(django_user_model):
    bea = make_user(django_user_model, "bea", "approver")
    bea.email = "bea@example.com"
    bea.save()
    return bea


@pytest.fixture
def sweep(django_capture_on_commit_callbacks):
    def _sweep(approval: Approval, minutes: float) -> list[tuple[str, str]]:
        """The reminder sweep as if run `minutes` after the request; what it sent."""
        sent: list[tuple[str, str]] = []
        with django_capture_on_commit_callbacks(execute=True):
            reminders.remind_due(
                lambda a, k: sent.append((a, k)),
                now=approval.requested_at + timedelta(minutes=minutes),
            )
        return [k for _, k in sent]

    return _sweep


def test_by_default_at_half_life_and_at_ten_percent_left_each_once(sweep, no_enqueue):
    # The default timeout: 24 hours.
    _, approval = gated("test-payer", TRANSFER)
    assert sweep(approval, 60) == []
    assert sweep(approval, 12 * 60 + 1) == ["expiry:0.5"]
    assert sweep(approval, 12 * 60 + 2) == []  # the beat runs again: nothing new
    assert sweep(approval, 21 * 60 + 40) == ["expiry:0.1"]
    assert sweep(approval, 23 * 60) == []
    assert sorted(approval.reminders.values_list("key", flat=True)) == ["expiry:0.1", "expiry:0.5"]


def test_a_late_sweep_sends_only_the_latest_due_reminder(sweep, no_enqueue):
    _, approval = gated("test-payer", TRANSFER)
    assert sweep(approval, 23 * 60) == ["expiry:0.1"]
    assert approval.reminders.count() == 2  # the half-life one is recorded as passed
    assert sweep(approval, 23 * 60 + 30) == []


def test_an_agent_chooses_its_own_reminders(sweep, no_enqueue):
    _, approval = gated(
        "test-payer", TRANSFER, approval_timeout_seconds=3600, reminders=[0.75, 0.25]
    )
    assert sweep(approval, 10) == []
    assert sweep(approval, 16) == ["expiry:0.75"]
    assert sweep(approval, 46) == ["expiry:0.25"]


def test_a_reminder_before_each_escalation(sweep, no_enqueue):
    chain = [{"after_seconds": 15 * 60, "users": [], "roles": ["admin"]}]
    _, approval = gated(
        "test-payer", TRANSFER, escalation=chain, approval_timeout_seconds=3600, reminders=[]
    )
    assert sweep(approval, 11) == []
    assert sweep(approval, 12.5) == ["escalation:1"]  # 20 % of the 15 minutes left
    assert sweep(approval, 14) == []
    assert sweep(approval, 16) == []  # escalated by then: no reminder after the fact


def test_no_reminder_once_decided_and_none_when_turned_off(sweep, approver, no_enqueue):
    _, approval = gated("test-payer", TRANSFER)
    decisions.decide(approval.pk, user=approver, decision="reject", reason="no")
    assert sweep(approval, 23 * 60) == []
    _, quiet = gated("test-payer", TRANSFER, reminders=[], remind_before_escalation=0)
    assert sweep(quiet, 23 * 60) == []


def test_two_sweeps_at_once_send_it_once(sweep, no_enqueue):
    _, approval = gated("test-payer", TRANSFER)
    # Another host's sweep recorded it between this one's read and its write.
    ApprovalReminder.objects.create(approval=approval, key="expiry:0.5")
    assert sweep(approval, 12 * 60 + 1) == []


def test_the_reminder_email_says_what_happens_at_the_deadline(settings, bea_with_email, no_enqueue):
    configure(settings, email=True)
    _, approval = gated("test-payer", TRANSFER, on_expiry="halt")
    assert tasks.send_reminder_email(str(approval.pk), "expiry:0.5") == 1
    message = mail.outbox[-1]
    assert message.subject.startswith("[agentops] Reminder: Approval needed: test_transfer")
    assert "Nobody has decided this yet; it expires at " in message.body
    assert "the run halts" in message.body
    assert "/approvals/link/" in message.body  # the approver's one-tap link, again
    decisions.decide(approval.pk, user=bea_with_email, decision="reject", reason="no")
    assert tasks.send_reminder_email(str(approval.pk), "expiry:0.1") == 0


@pytest.mark.django_db(transaction=True)
def test_the_sweep_sends_reminders_through_email_and_webhooks(
    settings, endpoint, eager, bea_with_email, no_enqueue
):
    hook = endpoint()
    configure(settings, hook.url, email=True)
    _, approval = gated("test-payer", TRANSFER, approval_timeout_seconds=60, reminders=[0.5])
    requested = len(hook.requests)
    mail.outbox.clear()
    ApprovalReminder.objects.all().delete()
    # Half the minute gone: the beat's escalate task sends the reminder.
    back = timedelta(seconds=31)
    Approval.objects.filter(pk=approval.pk).update(
        requested_at=approval.requested_at - back, expires_at=approval.expires_at - back
    )
    tasks.escalate_approvals()
    tasks.escalate_approvals()
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == ["bea@example.com"]
    reminders_sent = hook.requests[requested:]
    assert len(reminders_sent) == 1
    body = json.loads(reminders_sent[0]["body"])
    assert body["event"] == "approval.reminder"
    assert body["reminder"]["key"] == "expiry:0.5"
    assert body["approval"]["id"] == str(approval.pk)
    # Its own delivery id: a receiver that de-duplicates does not drop it as a retry.
    assert reminders_sent[0]["headers"]["webhook-id"] != hook.requests[0]["headers"]["webhook-id"]
    assert SECRET  # signed like every webhook (test_notify checks the signature)
