"""Approver quality: override rate (approvals later contradicted) and the rubber-stamping
flag (fast on high-risk calls while approving nearly everything)."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from approvals import decisions
from approvals.learning import rules as learning
from approvals.learning import stats
from approvals.models import Approval, ApprovalView
from tests.conftest import make_user

from ..conftest import gated
from .test_rules import approve_credits, credit_run, drive

pytestmark = pytest.mark.django_db

SMALL = {"to": "acme", "amount": "10"}  # test_transfer: irreversible, high risk


def _opened(approval, user, seconds_ago: float) -> None:
    view = decisions.record_open(approval, user)
    ApprovalView.objects.filter(pk=view.pk).update(
        first_opened_at=view.first_opened_at - timedelta(seconds=seconds_ago)
    )


def _row(name: str) -> dict:
    return next(r for r in stats.approver_stats()["approvers"] if r["approver"] == name)


def test_fast_approvals_of_high_risk_calls_are_flagged(operator, approver, no_enqueue):
    for _ in range(5):
        _, approval = gated("test-payer", SMALL, by=operator)
        _opened(approval, approver, 2)
        decisions.decide(approval.pk, user=approver, decision="approve")
    row = _row(approver.username)
    assert row["median_seconds_high_risk"] < 10 and row["approval_rate"] == 1.0
    assert row["rubber_stamping"] is True


def test_reading_high_risk_calls_or_rejecting_some_is_not_rubber_stamping(
    operator, approver, django_user_model, no_enqueue
):
    careful = make_user(django_user_model, "carol", "approver")
    for i in range(6):
        _, slow = gated("test-payer", SMALL, by=operator)
        _opened(slow, careful, 45)
        decisions.decide(slow.pk, user=careful, decision="approve")
        _, fast = gated("test-payer", SMALL, by=operator)
        _opened(fast, approver, 1)
        decision = "reject" if i % 2 else "approve"
        decisions.decide(fast.pk, user=approver, decision=decision, reason="no")
    assert _row("carol")["rubber_stamping"] is False  # slow
    assert _row(approver.username)["rubber_stamping"] is False  # rejects half


def test_approvals_that_earned_a_revoked_rule_count_as_overridden(
    approver, django_user_model, no_enqueue, client
):
    admin = make_user(django_user_model, "adele", "admin")
    approve_credits(approver, 3)
    approve_credits(approver, 1, amount="60")  # not evidence of the rule below
    rule = learning.AutoApproveRule.objects.get()
    learning.accept(rule, by=admin, expires_at=timezone.now() + timedelta(1), max_hits=5)
    run = credit_run(check_rate=1.0)
    drive(run)
    checker = make_user(django_user_model, "chuck", "approver")
    decisions.decide(Approval.objects.get(run=run).pk, user=checker, decision="reject", reason="x")
    row = _row(approver.username)
    assert (row["contradicted"], row["override_rate"]) == (3, 0.75)
    assert _row("chuck")["override_rate"] is None  # approved nothing
    client.force_login(admin)
    page = client.get(reverse("approvals:stats")).content.decode()
    assert "Override rate" in page and "75%" in page


def test_an_approval_rejected_by_another_of_the_quorum_counts_as_overridden(
    operator, approver, django_user_model, no_enqueue
):
    second = make_user(django_user_model, "quinn", "approver")
    _, approval = gated("test-payer", SMALL, by=operator, quorum_from="high", quorum=2)
    decisions.decide(approval.pk, user=approver, decision="approve")
    decisions.decide(approval.pk, user=second, decision="reject", reason="wrong vendor")
    assert (_row(approver.username)["contradicted"], _row(approver.username)["override_rate"]) == (
        1,
        1.0,
    )
