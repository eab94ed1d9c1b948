"""Each item of a batch decision answers with the status its own decision would have had
(approvals/batch.py): 404 for an approval that does not exist, 403 for one this approver may
not decide, 409 for one already decided, shown another call or whose run has finished, 422
for one the batch cannot decide; an item that fails changes nothing of its own and nothing
of the others."""

import json
import uuid

import pytest
from django import forms
from django.test import Client

from accounts.models import ApiToken
from agentkit.agents import CATALOGUE, register
from agentkit.llm.scripted import tool_use
from agentkit.tools import Blast, tool
from approvals import batch
from approvals.models import Approval
from runs.models import Run, args_hash
from tests.conftest import make_user

from .conftest import _agent, _report, gated

pytestmark = pytest.mark.django_db


@tool(reversible=True, blast=Blast.LOW, name="test_batch_label")
def batch_label(label: str) -> dict:
    """Put a label on a ticket (undone by removing it)."""
    return {"labelled": label}


class LabelInput(forms.Form):
    label = forms.CharField(max_length=50)


def label_script(data: dict) -> list:
    return [[tool_use("test_batch_label", label=data["label"])], _report]


if "test-batch-labeller" not in CATALOGUE:
    register(
        _agent(
            "test-batch-labeller",
            label_script,
            ("test_batch_label",),
            form=LabelInput,
            always_gate=("test_batch_label",),
        )
    )


def labelled(label: str, *, by, **gates) -> Approval:
    return gated("test-batch-labeller", {"label": label}, by=by, **gates)[1]


def shown(approval: Approval) -> str:
    return args_hash(approval.tool, approval.args)


def by_id(results: list[batch.ItemResult]) -> dict[str, tuple[str, int]]:
    return {r.approval: (r.result, r.status) for r in results}


def untouched(approval: Approval) -> None:
    """Still pending, no vote, and its run's timeline ends at the gate."""
    before = approval.run.last_seq
    approval.refresh_from_db()
    approval.run.refresh_from_db()
    assert approval.status == Approval.Status.PENDING
    assert approval.votes.count() == 0
    assert approval.run.last_seq == before


@pytest.fixture
def pending(operator, no_enqueue) -> Approval:
    return labelled("ok", by=operator)


def test_an_approval_that_does_not_exist_is_a_404_item_and_the_others_are_decided(
    pending, approver
):
    missing = str(uuid.uuid4())
    results = batch.decide_batch(
        user=approver,
        decision="approve",
        items=[(missing, "0" * 64), ("not-an-id", "x"), (str(pending.pk), shown(pending))],
    )
    assert by_id(results) == {
        missing: ("not_found", 404),
        "not-an-id": ("not_found", 404),
        str(pending.pk): ("decided", 200),
    }
    assert Approval.objects.get(pk=pending.pk).status == Approval.Status.APPROVED


def test_an_approval_this_approver_may_not_decide_is_a_403_item(operator, approver, no_enqueue):
    theirs = labelled("named", by=operator, approvers=["someone-else"])
    mine = labelled("open", by=operator)
    results = batch.decide_batch(
        user=approver,
        decision="reject",
        items=[(str(theirs.pk), shown(theirs)), (str(mine.pk), shown(mine))],
        reason="not now",
    )
    assert by_id(results) == {str(theirs.pk): ("refused", 403), str(mine.pk): ("decided", 200)}
    (refused,) = [r for r in results if r.status == 403]
    assert "named approvers" in refused.message
    untouched(theirs)


def test_a_launcher_approving_a_call_of_their_own_run_under_four_eyes_is_a_403_item(
    no_enqueue, django_user_model
):
    # Four-eyes from "low": the label is a low-risk call, which a batch may approve.
    launcher = make_user(django_user_model, "opal", "operator", "approver")
    own = labelled("mine", by=launcher, four_eyes_from="low")
    (result,) = batch.decide_batch(
        user=launcher, decision="approve", items=[(str(own.pk), shown(own))]
    )
    assert (result.result, result.status) == ("refused", 403)
    assert "four-eyes" in result.message
    untouched(own)


def test_an_approval_already_decided_is_a_409_item_naming_who_decided(
    pending, approver, admin_user
):
    first = batch.decide_batch(
        user=admin_user, decision="approve", items=[(str(pending.pk), shown(pending))]
    )
    assert by_id(first) == {str(pending.pk): ("decided", 200)}
    (again,) = batch.decide_batch(
        user=approver,
        decision="reject",
        items=[(str(pending.pk), shown(pending))],
        reason="too late",
    )
    assert (again.result, again.status) == ("conflict", 409)
    assert "already approved by ada" in again.message
    pending.refresh_from_db()
    assert (pending.status, pending.decided_by) == (Approval.Status.APPROVED, admin_user)


def test_an_item_shown_another_call_is_a_409_item_for_a_rejection_too(pending, approver):
    (result,) = batch.decide_batch(
        user=approver, decision="reject", items=[(str(pending.pk), "0" * 64)], reason="no"
    )
    assert (result.result, result.status) == ("refused", 409)
    untouched(pending)


def test_an_approval_whose_run_was_cancelled_is_a_409_item(pending, approver, operator):
    assert pending.run.cancel(by=operator)
    (result,) = batch.decide_batch(
        user=approver, decision="approve", items=[(str(pending.pk), shown(pending))]
    )
    assert (result.result, result.status) == ("conflict", 409)
    assert "cancelled" in result.message
    assert Approval.objects.get(pk=pending.pk).status == Approval.Status.CANCELLED


def test_a_rejection_whose_reason_is_too_long_is_a_422_item_for_each(
    approver, operator, no_enqueue
):
    a, b = labelled("a", by=operator), labelled("b", by=operator)
    results = batch.decide_batch(
        user=approver,
        decision="reject",
        items=[(str(a.pk), shown(a)), (str(b.pk), shown(b))],
        reason="x" * 5001,
    )
    assert by_id(results) == {str(a.pk): ("invalid", 422), str(b.pk): ("invalid", 422)}
    assert all("too long" in r.message for r in results)
    untouched(a)
    untouched(b)


def test_the_same_row_twice_is_one_decision(pending, approver):
    results = batch.decide_batch(
        user=approver,
        decision="approve",
        items=[(str(pending.pk), shown(pending)), (str(pending.pk), shown(pending))],
    )
    assert by_id(results) == {str(pending.pk): ("decided", 200)}
    assert len(results) == 1
    assert pending.votes.count() == 1


@pytest.mark.parametrize(
    ("decision", "items", "field"),
    [
        ("maybe", 1, "decision"),
        ("approve", 0, "items"),
        ("approve", batch.MAX_ITEMS + 1, "items"),
        ("reject", 1, "reason"),
    ],
)
def test_a_wrong_batch_decides_nothing(pending, approver, decision, items, field):
    rows = [(str(pending.pk), shown(pending))] + [
        (str(uuid.uuid4()), "0" * 64) for _ in range(items - 1)
    ]
    with pytest.raises(batch.BatchInvalid) as refused:
        batch.decide_batch(user=approver, decision=decision, items=rows[:items])
    assert field in refused.value.errors
    assert refused.value.message.startswith("nothing was decided")
    untouched(pending)


def test_the_api_answers_each_items_own_status(approver, operator, no_enqueue):
    """Over HTTP: 200 for the batch, and in it 200, 403, 404, 409 and 422 per item."""
    decided = labelled("fine", by=operator)
    forbidden = labelled("named", by=operator, approvers=["someone-else"])
    stale = labelled("stale", by=operator)
    question = Approval.objects.create(
        run=stale.run,
        gate_seq=stale.gate_seq,
        llm_seq=stale.llm_seq,
        kind=Approval.Kind.QUESTION,
        question="Which label?",
        explanation="asked",
        expires_at=stale.expires_at,
    )
    missing = str(uuid.uuid4())
    items = [
        {"id": str(decided.pk), "args_hash": shown(decided)},
        {"id": str(forbidden.pk), "args_hash": shown(forbidden)},
        {"id": missing, "args_hash": "0" * 64},
        {"id": str(stale.pk), "args_hash": "1" * 64},
        {"id": str(question.pk), "args_hash": ""},
    ]
    _, raw = ApiToken.issue(approver, "batch")
    response = Client(headers={"Authorization": f"Bearer {raw}"}).post(
        "/api/approvals/batch",
        json.dumps({"decision": "approve", "items": items}),
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    got = {r["approval"]: (r["result"], r["status"]) for r in response.json()["results"]}
    assert got == {
        str(decided.pk): ("decided", 200),
        str(forbidden.pk): ("refused", 403),
        missing: ("not_found", 404),
        str(stale.pk): ("refused", 409),
        str(question.pk): ("refused", 422),
    }
    assert Approval.objects.get(pk=decided.pk).status == Approval.Status.APPROVED
    for approval in (forbidden, stale):
        untouched(approval)
    assert Run.objects.get(pk=decided.run.pk).status == Run.Status.QUEUED
