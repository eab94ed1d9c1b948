"""Batch decisions: only the ticked approvals, each bound to the call its row showed, each
through the one decision path, with a result per item."""

import json
import re

import pytest
from django import forms
from django.test import Client
from django.urls import reverse

from accounts.models import ApiToken
from agentkit.agents import CATALOGUE, register
from agentkit.llm.scripted import tool_use
from agentkit.tools import Blast, tool
from approvals.models import Approval
from runs.models import Run, Step, args_hash
from tests.conftest import make_user

from .conftest import _agent, _report, gated

pytestmark = pytest.mark.django_db


@tool(reversible=True, blast=Blast.LOW, name="test_tag")
def tag_ticket(label: str) -> dict:
    """Put a label on a ticket (undone by removing it)."""
    return {"tagged": label}


class TagInput(forms.Form):
    label = forms.CharField(max_length=50)


def tag_script(data: dict) -> list:
    return [[tool_use("test_tag", label=data["label"])], _report]


if "test-tagger" not in CATALOGUE:
    register(
        _agent("test-tagger", tag_script, ("test_tag",), form=TagInput, always_gate=("test_tag",))
    )


@pytest.fixture
def tags(operator, no_enqueue) -> list[Approval]:
    return [gated("test-tagger", {"label": f"l{i}"}, by=operator)[1] for i in range(3)]


def item(approval: Approval, shown: str | None = None) -> str:
    return (
        f"{approval.pk}:{shown if shown is not None else args_hash(approval.tool, approval.args)}"
    )


def batch(user, decision: str, *items: str, reason: str = ""):
    client = Client()
    client.force_login(user)
    return client.post(
        reverse("approvals:batch"), {"decision": decision, "item": list(items), "reason": reason}
    )


def statuses(*approvals: Approval) -> list[str]:
    return [Approval.objects.get(pk=a.pk).status for a in approvals]


def results(response) -> dict[str, str]:
    html = response.content.decode()
    return dict(re.findall(r'data-approval-id="([0-9a-f-]+)" data-result="(\w+)"', html))


def test_only_the_ticked_approvals_are_approved(tags, approver):
    a, b, c = tags
    response = batch(approver, "approve", item(a), item(b))
    assert response.status_code == 200
    assert results(response) == {str(a.pk): "decided", str(b.pk): "decided"}
    assert statuses(a, b, c) == ["approved", "approved", "pending"]
    # Each went through the decision path: its own decision step in its own run.
    for approval in (a, b):
        step = Step.objects.get(run=approval.run, kind=Step.Kind.DECISION)
        assert step.data["by"] == "arthur" and step.data["decision"] == "approve"
    assert not Step.objects.filter(run=c.run, kind=Step.Kind.DECISION).exists()


def test_an_item_whose_call_was_not_shown_is_not_decided(tags, approver):
    a, b, _ = tags
    other = args_hash(b.tool, b.args)  # another row's call
    for decision in ("approve", "reject"):
        response = batch(approver, decision, item(a, other), item(b, ""), reason="x")
        assert results(response) == {str(a.pk): "refused", str(b.pk): "refused"}
        assert "not the call you were shown" in response.content.decode()
    assert statuses(a, b) == ["pending", "pending"]


def test_rejecting_needs_a_reason_and_then_tells_each_agent(tags, approver):
    a, b, _ = tags
    response = batch(approver, "reject", item(a), item(b))
    assert response.status_code == 422
    assert "Nothing was decided" in response.content.decode()
    assert statuses(a, b) == ["pending", "pending"]
    response = batch(approver, "reject", item(a), item(b), reason="wrong labels")
    assert set(results(response).values()) == {"decided"}
    assert [Approval.objects.get(pk=x.pk).reason for x in (a, b)] == ["wrong labels"] * 2


def test_a_result_per_item_with_conflicts_and_refusals(tags, approver, admin_user, operator):
    a, b, c = tags
    batch(admin_user, "approve", item(a))  # someone else was first on a
    _, transfer = gated("test-payer", {"to": "initech", "amount": "900.00"}, by=operator)
    question = Approval.objects.create(
        run=c.run,
        gate_seq=c.gate_seq,
        llm_seq=c.llm_seq,
        kind=Approval.Kind.QUESTION,
        question="Which?",
        explanation="asked",
        expires_at=c.expires_at,
    )
    response = batch(
        approver,
        "approve",
        item(a),
        item(b),
        item(transfer),
        f"{question.pk}:",
        "not-an-id:x",
    )
    got = results(response)
    assert got == {
        str(a.pk): "conflict",
        str(b.pk): "decided",
        str(transfer.pk): "refused",
        str(question.pk): "refused",
    }
    html = response.content.decode()
    assert "already approved by ada" in html
    assert "approved on its own screen" in html  # high risk: not from a list
    assert statuses(b, transfer, question) == ["approved", "pending", "pending"]
    # A high-risk call may be rejected from the list.
    response = batch(approver, "reject", item(transfer), reason="not this vendor")
    assert results(response) == {str(transfer.pk): "decided"}


def test_a_viewer_cannot_batch_decide(tags, viewer):
    response = batch(viewer, "approve", item(tags[0]))
    assert response.status_code == 403
    assert statuses(tags[0]) == ["pending"]


def test_the_batch_form_needs_csrf(tags, approver):
    client = Client(enforce_csrf_checks=True)
    client.force_login(approver)
    response = client.post(
        reverse("approvals:batch"), {"decision": "approve", "item": item(tags[0])}
    )
    assert response.status_code == 403
    assert statuses(tags[0]) == ["pending"]


def test_the_queue_rows_carry_the_hash_of_the_call_they_show(tags, approver):
    client = Client()
    client.force_login(approver)
    html = client.get(reverse("approvals:queue")).content.decode()
    for approval in tags:
        assert f'value="{item(approval)}"' in html
    assert 'id="batch-approve"' in html


def test_the_api_decides_a_batch_with_a_result_per_item(tags, approver, django_user_model):
    _, raw = ApiToken.issue(approver, "batch")
    client = Client(headers={"Authorization": f"Bearer {raw}"})
    a, b, c = tags
    body = {
        "decision": "approve",
        "items": [
            {"id": str(a.pk), "args_hash": args_hash(a.tool, a.args)},
            {"id": str(b.pk), "args_hash": "0" * 64},
        ],
    }
    response = client.post(
        "/api/approvals/batch", json.dumps(body), content_type="application/json"
    )
    assert response.status_code == 200, response.content
    by_id = {r["approval"]: r for r in response.json()["results"]}
    assert by_id[str(a.pk)]["result"] == "decided" and by_id[str(a.pk)]["message"] == "approved"
    assert by_id[str(b.pk)]["result"] == "refused" and by_id[str(b.pk)]["status"] == 409
    assert statuses(a, b, c) == ["approved", "pending", "pending"]
    bad = client.post(
        "/api/approvals/batch",
        json.dumps({"decision": "reject", "items": body["items"]}),
        content_type="application/json",
    )
    assert bad.status_code == 422 and "reason" in bad.json()["errors"]
    viewer = make_user(django_user_model, "vee", "viewer")
    _, raw = ApiToken.issue(viewer, "v")
    refused = Client(headers={"Authorization": f"Bearer {raw}"}).post(
        "/api/approvals/batch", json.dumps(body), content_type="application/json"
    )
    assert refused.status_code == 403


def test_an_approved_batch_item_runs(tags, approver):
    from .conftest import drive

    a = tags[0]
    batch(approver, "approve", item(a))
    run = Run.objects.get(pk=a.run_id)
    assert drive(run) == Run.Status.SUCCEEDED
    assert (run.approved_count, run.rejected_count) == (1, 0)
