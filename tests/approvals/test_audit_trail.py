"""Decisions cannot be rewritten: Postgres refuses it, and the run's hash chain finds it."""

import pytest
from django.db import transaction
from django.db.utils import DatabaseError

from approvals import decisions
from approvals.models import Approval, ApprovalVote
from runs.models import Step, canonical_json
from tests.conftest import on_postgres
from tests.runs.harness import tamper

from .conftest import drive, gated

pytestmark = pytest.mark.django_db(transaction=True)

BIG = {"to": "acme", "amount": "800.00"}  # over the 500 threshold: gated


@on_postgres
def test_postgres_refuses_to_rewrite_a_decision(operator, approver, no_enqueue):
    _, approval = gated("test-payer", BIG, by=operator)
    decisions.decide(approval.pk, user=approver, decision="approve")
    vote = ApprovalVote.objects.get(approval=approval)
    for rewrite in (
        lambda: Approval.objects.filter(pk=approval.pk).update(status="rejected"),
        lambda: Approval.objects.filter(pk=approval.pk).delete(),
        lambda: ApprovalVote.objects.filter(pk=vote.pk).update(decision="reject"),
        lambda: ApprovalVote.objects.filter(pk=vote.pk).delete(),
    ):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            rewrite()
    approval.refresh_from_db()
    assert approval.status == Approval.Status.APPROVED
    assert ApprovalVote.objects.get(pk=vote.pk).decision == "approve"


def test_an_edited_decision_breaks_the_chain(operator, approver, no_enqueue):
    run, approval = gated("test-payer", BIG, by=operator)
    decisions.decide(approval.pk, user=approver, decision="approve")
    drive(run)
    decision = run.steps.get(kind=Step.Kind.DECISION)
    assert run.verify_chain() == (True, None)
    forged = {**decision.data, "decision": "reject", "by": "someone else"}
    tamper("UPDATE runs_step SET data = %s WHERE id = %s", [canonical_json(forged), decision.pk])
    assert run.verify_chain() == (False, decision.seq)
