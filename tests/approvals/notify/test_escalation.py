"""Escalation chains: after each tier's delay without a decision, that tier is told once and
may then decide; at the deadline the approval's on_expiry applies as always."""

from datetime import timedelta

import pytest
from django.core import mail

from agentkit.agents import EscalationTier, GateRules
from approvals import decisions, tasks
from approvals.models import Approval, Escalation
from approvals.notify import email, escalation
from runs.models import Run, Step
from tests.conftest import make_user

from ..conftest import gated

pytestmark = pytest.mark.django_db

CHAIN = [
    {"after_seconds": 15 * 60, "users": ["carl"], "roles": []},
    {"after_seconds": 60 * 60, "users": [], "roles": ["admin"]},
]
TRANSFER = {"to": "initech", "amount": "900.00"}


@pytest.fixture
def people(django_user_model, admin_user):
    bea = make_user(django_user_model, "bea", "approver")
    carl = make_user(django_user_model, "carl", "approver")
    for user, address in ((bea, "bea@example.com"), (carl, "carl@example.com")):
        user.email = address
        user.save()
    return bea, carl, admin_user


@pytest.fixture
def escalating(operator, people, no_enqueue):
    return gated("test-payer", TRANSFER, by=operator, approvers=["bea"], escalation=CHAIN)


@pytest.fixture
def sweep(django_capture_on_commit_callbacks):
    def _sweep(approval: Approval, minutes: float) -> list[tuple[str, int]]:
        """The sweep as if run `minutes` after the request; who it told, after its commit."""
        told: list[tuple[str, int]] = []
        with django_capture_on_commit_callbacks(execute=True):
            escalation.escalate_due(
                lambda a, n: told.append((a, n)),
                now=approval.requested_at + timedelta(minutes=minutes),
            )
        return told

    return _sweep


def test_the_declaration_is_snapshotted_into_the_run():
    rules = GateRules(
        escalation=(EscalationTier(after=timedelta(minutes=15), users=("carl",)),)
    ).as_dict()
    assert rules["escalation"] == [{"after_seconds": 900, "users": ["carl"], "roles": []}]


def test_each_tier_is_notified_once_when_its_time_comes(sweep, escalating, people):
    _, approval = escalating
    assert sweep(approval, 10) == []
    assert sweep(approval, 16) == [(str(approval.pk), 1)]
    assert sweep(approval, 20) == []  # once
    assert sweep(approval, 61) == [(str(approval.pk), 2)]
    assert sweep(approval, 90) == []
    tiers = {e.tier: e.notified for e in Escalation.objects.filter(approval=approval)}
    assert tiers == {1: ["carl"], 2: ["ada"]}


def test_a_tier_may_decide_once_it_is_told(sweep, escalating, people):
    run, approval = escalating
    _, carl, _ = people
    with pytest.raises(decisions.DecisionForbidden, match="named approvers"):
        decisions.decide(approval.pk, user=carl, decision="reject", reason="too much")
    run.refresh_from_db()
    seq = run.last_seq
    sweep(approval, 16)
    decided = decisions.decide(approval.pk, user=carl, decision="reject", reason="too much")
    assert decided.status == Approval.Status.REJECTED
    assert Step.objects.get(run=run, seq=seq + 1).data["by"] == "carl"


def test_the_escalation_email_goes_to_the_tier_with_its_own_link(
    sweep, escalating, people, settings
):
    _, approval = escalating
    sweep(approval, 16)
    assert email.send_escalation_email(str(approval.pk), 1) == 1
    (message,) = mail.outbox
    assert message.to == ["carl@example.com"]
    assert message.subject.startswith("[agentops] Escalated, no decision after 16 min")
    assert "/approvals/link/" in message.body and "escalation tier 1" in message.body
    # A decided approval is not escalated any more.
    assert email.send_escalation_email(str(approval.pk), 2) == 0


def test_nothing_escalates_without_a_chain_or_after_the_deadline(
    sweep, operator, people, no_enqueue
):
    _, plain = gated("test-payer", TRANSFER, by=operator)
    assert sweep(plain, 24 * 60 - 1) == []
    _, late = gated("test-payer", TRANSFER, by=operator, escalation=CHAIN)
    # At the deadline the approval expires (on_expiry) instead.
    assert sweep(late, 25 * 60) == []
    decisions.expire_due(now=late.expires_at)
    late.refresh_from_db()
    assert late.status == Approval.Status.EXPIRED
    assert not Escalation.objects.exists()


def test_the_card_shows_who_was_told(sweep, escalating, people, client):
    _, approval = escalating
    sweep(approval, 16)
    client.force_login(people[0])
    html = client.get(f"/approvals/{approval.pk}/").content.decode()
    assert 'id="escalations"' in html and "tier 1" in html and "carl" in html


def test_the_periodic_task_runs_the_sweep_and_queues_the_email(
    escalating, monkeypatch, settings, django_capture_on_commit_callbacks
):
    settings.AGENTOPS = {**settings.AGENTOPS, "NOTIFY_EMAIL": True}
    _, approval = escalating
    Approval.objects.filter(pk=approval.pk).update(
        requested_at=approval.requested_at - timedelta(minutes=20)
    )
    queued = []
    monkeypatch.setattr(tasks.send_escalation_email, "delay", lambda *a: queued.append(a))
    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.escalate_approvals() == 1
    assert queued == [(str(approval.pk), 1)]
    assert Run.objects.get(pk=approval.run_id).status == Run.Status.WAITING


def test_the_demo_refund_desk_escalates_to_the_admins(sweep, operator, admin_user, no_enqueue):
    _, approval = gated(
        "refund-desk-escalating",
        {"order_id": 3, "amount": "600.00", "reason": "Broken"},
        by=operator,
    )
    assert approval.tool == "issue_refund"
    with pytest.raises(decisions.DecisionForbidden):
        decisions.decide(approval.pk, user=admin_user, decision="reject", reason="no")
    assert sweep(approval, 3) == [(str(approval.pk), 1)]
    assert Escalation.objects.get(approval=approval).notified == ["ada"]
    decisions.decide(approval.pk, user=admin_user, decision="reject", reason="too large")
    approval.refresh_from_db()
    assert approval.status == Approval.Status.REJECTED
