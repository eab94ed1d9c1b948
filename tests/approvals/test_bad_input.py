"""Bad input on the approval pages and API: a clear 4xx, never a 500, nothing decided.
And model-chosen text that reaches these pages indirectly (explanations and decision
messages quote argument values) stays inert."""

import json

import pytest
from django.test import Client
from django.urls import reverse

from accounts.models import ApiToken
from approvals.models import Approval, ApprovalView
from runs.models import Run, args_hash
from tests.html_checks import assert_payload_inert
from tests.runs.factories import XSS

from .test_views import gated_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def gated(operator, no_enqueue):
    return gated_run(operator)


@pytest.fixture
def as_approver(approver) -> Client:
    client = Client()
    client.force_login(approver)
    return client


def still_pending(approval: Approval) -> bool:
    approval.refresh_from_db()
    return approval.status == Approval.Status.PENDING and not approval.votes.exists()


def test_a_nul_character_in_a_decision_form_is_a_400_and_decides_nothing(as_approver, gated):
    _run, approval = gated
    url = reverse("approvals:decide", args=[approval.pk])
    for data in (
        {"decision": "reject", "reason": "no\x00"},
        {"decision": "edit_approve", "arg_to": "boss@example.com\x00"},
    ):
        response = as_approver.post(url, data, HTTP_HX_REQUEST="true")
        assert response.status_code == 400
        assert "NUL character" in response.content.decode()
    assert still_pending(approval)


def test_a_nul_character_in_a_json_decision_is_a_400_and_decides_nothing(approver, gated):
    _run, approval = gated
    _, raw = ApiToken.issue(approver, "t")
    client = Client(headers={"Authorization": f"Bearer {raw}"})
    url = f"/api/approvals/{approval.pk}/decision"
    for body in (
        {"decision": "reject", "reason": "no\u0000"},
        {"decision": "approve", "arguments": {"to": "a@example.com", "body": "x\u0000"}},
        {"decision": "approve", "arguments": {"to\u0000": "a@example.com"}},
    ):
        response = client.post(url, json.dumps(body), content_type="application/json")
        assert response.status_code == 400, body
        assert "NUL" in response.json()["detail"]
    assert still_pending(approval)


def test_garbage_in_the_decision_form_is_a_4xx(as_approver, gated):
    _run, approval = gated
    url = reverse("approvals:decide", args=[approval.pk])
    assert as_approver.post(url, {"decision": "zzz"}).status_code == 422
    assert as_approver.post(url, {"decision": "reject", "reason": ""}).status_code == 422
    assert still_pending(approval)
    # A forged or stale "opened" token is ignored, not an error.
    response = as_approver.post(url, {"decision": "reject", "reason": "no", "opened": "x" * 5000})
    assert response.status_code == 200
    approval.refresh_from_db()
    assert approval.status == Approval.Status.REJECTED


def test_queue_and_api_filters_survive_garbage(as_approver, approver, gated):
    assert as_approver.get("/approvals/", {"risk": "zzz", "agent": "x" * 5000}).status_code == 200
    assert as_approver.get("/approvals/stats/", {"days": "abc"}).status_code == 403
    assert as_approver.get("/approvals/", {"agent": "\x00"}).status_code == 400
    for query, field in (({"offset": str(2**63)}, "offset"), ({"limit": "9" * 30}, "limit")):
        response = as_approver.get("/api/approvals", query)
        assert response.status_code == 422
        assert field in response.json()["errors"]


def test_api_reading_an_approval_writes_nothing(approver, gated):
    _run, approval = gated
    _, raw = ApiToken.issue(approver, "t")
    client = Client(headers={"Authorization": f"Bearer {raw}"})
    assert client.get(f"/api/approvals/{approval.pk}").status_code == 200
    assert client.get("/api/approvals").status_code == 200
    assert not ApprovalView.objects.exists()
    assert still_pending(approval)


def test_explanations_quoting_model_values_are_inert(as_approver, gated):
    _run, approval = gated
    Approval.objects.filter(pk=approval.pk).update(explanation=f"to {XSS} is not allowed")
    for url in (reverse("approvals:queue"), reverse("approvals:detail", args=[approval.pk])):
        html = as_approver.get(url).content.decode()
        assert "&lt;script&gt;" in html, url
        assert_payload_inert(html)


def test_decision_messages_quoting_argument_values_are_inside_hx_disable(as_approver, gated):
    _run, approval = gated
    # A refused edit quotes the policy's explanation, which quotes the edited value.
    response = as_approver.post(
        reverse("approvals:decide", args=[approval.pk]),
        {
            "decision": "edit_approve",
            "shown_args_hash": args_hash(approval.tool, approval.args),
            "arg_to": "__pwned@evil.example",
            "arg_subject": approval.args["subject"],
            "arg_body": approval.args["body"],
        },
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 422
    html = response.content.decode()
    assert "__pwned@evil.example" in html  # the value is quoted back...
    assert_payload_inert(html)  # ...only as text inside hx-disable
    assert still_pending(approval)
    assert Run.objects.get(pk=approval.run_id).status == Run.Status.WAITING
