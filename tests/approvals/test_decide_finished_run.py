"""Deciding an approval whose run has already finished: a 409 that says so, from the screen,
the API and the one-tap link alike, and nothing changes (no vote, no step, nothing sent to a
worker, the approval as it was)."""

import json

import pytest
from django.test import Client
from django.urls import reverse

from approvals import decisions
from approvals.models import Approval
from approvals.notify.one_tap import links as one_tap
from runs.models import Run, args_hash

from .conftest import EXECUTED, gated

pytestmark = pytest.mark.django_db

AMOUNT = {"to": "initech", "amount": "900.00"}


@pytest.fixture
def waiting(operator, no_enqueue) -> tuple[Run, Approval]:
    return gated("test-payer", AMOUNT, by=operator)


def finish(run: Run) -> Run:
    """The run ends while its approval is still pending (a worker failed it on a limit
    between the gate and the decision): the approval was never closed."""
    run = Run.objects.get(pk=run.pk)
    assert run.transition_to(
        Run.Status.FAILED,
        expect=Run.Status.WAITING,
        termination_reason=Run.Termination.MAX_SECONDS,
    )
    return run


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def assert_unchanged(run: Run, approval: Approval, status: str, enqueued: list) -> None:
    before = run.last_seq
    run.refresh_from_db()
    approval.refresh_from_db()
    assert approval.status == status
    assert approval.votes.count() == 0
    assert run.last_seq == before
    assert enqueued == []
    assert EXECUTED == []


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_deciding_a_pending_approval_of_a_finished_run_is_a_conflict(
    waiting, approver, no_enqueue, decision
):
    run, approval = waiting
    run = finish(run)
    with pytest.raises(decisions.DecisionConflict) as refused:
        decisions.decide(
            approval.pk,
            user=approver,
            decision=decision,
            reason="no",
            shown_args_hash=args_hash(approval.tool, approval.args),
        )
    assert "the run is already failed" in refused.value.message
    assert refused.value.status == 409
    assert_unchanged(run, approval, Approval.Status.PENDING, no_enqueue)


def test_the_api_answers_409_and_its_detail_says_it_cannot_be_decided(
    waiting, approver, no_enqueue
):
    run, approval = waiting
    run = finish(run)
    client = client_for(approver)
    url = f"/api/approvals/{approval.pk}"
    detail = client.get(url).json()
    assert detail["can_decide"] is False
    response = client.post(
        url + "/decision",
        json.dumps(
            {"decision": "approve", "shown_args_hash": args_hash(approval.tool, approval.args)}
        ),
        content_type="application/json",
    )
    assert response.status_code == 409, response.content
    assert "already failed" in response.json()["detail"]
    assert response.json()["approval_status"] == Approval.Status.PENDING
    assert_unchanged(run, approval, Approval.Status.PENDING, no_enqueue)


def test_the_decision_screen_answers_409_and_decides_nothing(waiting, approver, no_enqueue):
    run, approval = waiting
    run = finish(run)
    shown = args_hash(approval.tool, approval.args)
    response = client_for(approver).post(
        reverse("approvals:decide", args=[approval.pk]),
        {"decision": "reject", "reason": "no", "shown_args_hash": shown, "confirmed": shown},
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 409
    assert "already failed" in response.content.decode()
    assert_unchanged(run, approval, Approval.Status.PENDING, no_enqueue)


def test_a_one_tap_rejection_for_a_finished_run_is_409_and_leaves_the_link_unused(
    waiting, approver, no_enqueue
):
    run, approval = waiting
    token = one_tap.token_for(approval, approver)
    run = finish(run)
    response = client_for(approver).post(
        reverse("approvals:one_tap", args=[token]),
        {"decision": "reject", "reason": "no"},
    )
    assert response.status_code == 409
    assert approval.links.get(user=approver).used_at is None
    assert_unchanged(run, approval, Approval.Status.PENDING, no_enqueue)


def test_an_approval_of_a_cancelled_run_was_cancelled_with_it_and_says_so(
    waiting, approver, operator, no_enqueue
):
    run, approval = waiting
    assert run.cancel(by=operator)
    with pytest.raises(decisions.DecisionConflict) as refused:
        decisions.decide(
            approval.pk,
            user=approver,
            decision="approve",
            shown_args_hash=args_hash(approval.tool, approval.args),
        )
    assert "its run was cancelled" in refused.value.message
    assert_unchanged(run, approval, Approval.Status.CANCELLED, no_enqueue)
