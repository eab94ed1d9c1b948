"""Delegation: a delegate decides what the approver could, during the period only, with
"acting for" in the run's hash chain; the four-eyes rule and quorums still hold."""

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from approvals import decisions, permissions
from approvals.models import Approval, Delegation
from approvals.notify import email
from runs.models import Step

from .conftest import gated

pytestmark = pytest.mark.django_db

TRANSFER = {"to": "initech", "amount": "900.00"}


def delegate(user, to, *, starts=-1, ends=+1) -> Delegation:
    now = timezone.now()
    return Delegation.objects.create(
        user=user,
        delegate=to,
        starts=now + timedelta(hours=starts),
        ends=now + timedelta(hours=ends),
    )


@pytest.fixture
def named(operator, bea, no_enqueue):
    """A transfer only bea may decide."""
    return gated("test-payer", TRANSFER, by=operator, approvers=["bea"])


def test_a_delegate_decides_for_the_approver_and_the_chain_says_so(named, bea, dan):
    run, approval = named
    with pytest.raises(decisions.DecisionForbidden):
        decisions.decide(approval.pk, user=dan, decision="reject", reason="no")
    delegate(bea, dan)
    decided = decisions.decide(approval.pk, user=dan, decision="reject", reason="no")
    assert decided.status == Approval.Status.REJECTED and decided.decided_by == dan
    step = Step.objects.filter(run=run, kind=Step.Kind.DECISION).get()
    assert (step.data["by"], step.data["acting_for"]) == ("dan", "bea")
    run.refresh_from_db()
    assert run.verify_chain() == (True, None)


@pytest.mark.parametrize("period", [(-3, -1), (+1, +3)], ids=["ended", "not-started"])
def test_outside_its_period_a_delegation_gives_nothing(named, bea, dan, period):
    run, approval = named
    delegate(bea, dan, starts=period[0], ends=period[1])
    seq = run.last_seq
    with pytest.raises(decisions.DecisionForbidden, match="named approvers"):
        decisions.decide(approval.pk, user=dan, decision="reject", reason="no")
    run.refresh_from_db()
    assert run.last_seq == seq
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING


def test_the_delegates_own_four_eyes_rule_still_holds(bea, dan, no_enqueue):
    # dan launched the run: acting for bea does not let him approve his own high-risk call.
    _, approval = gated("test-payer", TRANSFER, by=dan, approvers=["bea"])
    delegate(bea, dan)
    with pytest.raises(decisions.DecisionForbidden):
        decisions.decide(
            approval.pk, user=dan, decision="approve", shown_args_hash=None, arguments=None
        )


def test_a_quorum_needs_each_approvers_own_vote(operator, bea, dan, no_enqueue):
    _, approval = gated(
        "test-payer", TRANSFER, by=operator, approvers=["bea"], quorum_from="high", quorum=2
    )
    delegate(bea, dan)
    with pytest.raises(decisions.DecisionForbidden):
        decisions.decide(approval.pk, user=dan, decision="reject", reason="no")


def test_a_delegate_is_emailed_while_the_delegation_lasts(named, bea, dan):
    _, approval = named
    bea.email, dan.email = "bea@example.com", "dan@example.com"
    bea.save()
    dan.save()
    assert email.approver_emails(approval) == ["bea@example.com"]
    delegate(bea, dan)
    assert email.approver_emails(approval) == ["bea@example.com", "dan@example.com"]


def test_the_delegation_page_sets_and_ends_a_delegation(bea, dan, viewer):
    client = Client()
    client.force_login(bea)
    page = reverse("approvals:delegations")
    assert client.get(page).status_code == 200
    now = timezone.now()
    fmt = "%Y-%m-%dT%H:%M"
    bad = client.post(
        page,
        {"delegate": dan.pk, "starts": now.strftime(fmt), "ends": now.strftime(fmt)},
    )
    assert bad.status_code == 422 and not Delegation.objects.exists()
    assert (
        client.post(
            page, {"delegate": bea.pk, "starts": now.strftime(fmt), "ends": "2999-01-01T00:00"}
        ).status_code
        == 422
    )  # not to oneself
    ok = client.post(
        page,
        {
            "delegate": dan.pk,
            "starts": (now - timedelta(minutes=1)).strftime(fmt),
            "ends": (now + timedelta(days=3)).strftime(fmt),
        },
    )
    assert ok.status_code == 302
    delegation = Delegation.objects.get()
    assert (delegation.user, delegation.delegate) == (bea, dan)
    assert Delegation.objects.active().count() == 1
    client.post(reverse("approvals:end_delegation", args=[delegation.pk]))
    assert Delegation.objects.active().count() == 0
    # Another approver cannot end it, and a viewer has no delegation page.
    other = Client()
    other.force_login(dan)
    assert other.post(reverse("approvals:end_delegation", args=[delegation.pk])).status_code == 404
    other.force_login(viewer)
    assert other.get(page).status_code == 403
    assert other.post(reverse("approvals:end_delegation", args=[delegation.pk])).status_code == 403


def test_delegated_approvals_are_assigned_to_the_delegate(named, bea, dan):
    _, approval = named
    client = Client()
    client.force_login(dan)
    queue = reverse("approvals:queue") + "?mine=1"
    assert str(approval.pk) not in client.get(queue).content.decode()
    delegate(bea, dan)
    assert str(approval.pk) in client.get(queue).content.decode()
    assert permissions.may_decide(approval, dan)
