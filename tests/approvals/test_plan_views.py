"""The plan screen (approve, edit, reject a plan as a whole), the run page's to-do list and
what the run page is pushed when a plan moves; the plans API and its OpenAPI description."""

import pytest
from django.test import Client
from django.urls import reverse

from accounts.models import ApiToken
from approvals.models import Approval, Plan
from runs import rendering
from runs.models import Run, Step
from tests.conftest import make_user

from .conftest import drive, launch

pytestmark = pytest.mark.django_db

INPUT = {"order_id": 13, "amount": "40.00", "reason": "Arrived damaged"}


@pytest.fixture
def plan(no_enqueue) -> Approval:
    run = launch("planned-refund-desk", INPUT)
    assert drive(run) == Run.Status.WAITING
    return Approval.objects.get(run=run, kind=Approval.Kind.PLAN)


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_plan_screen_shows_the_goal_the_steps_and_what_it_cannot_cover(bea, plan):
    client = client_for(bea)
    # The approval's usual address leads to the plan's screen.
    assert client.get(reverse("approvals:detail", args=[plan.pk])).url == reverse(
        "approvals:plan", args=[plan.pk]
    )
    page = client.get(reverse("approvals:plan", args=[plan.pk])).content.decode()
    assert "Refund 40.00 on order 13 and tell the customer" in page
    assert 'data-tool="issue_refund"' in page and 'name="value_1_1" value="40.00"' in page
    # The refund is high-risk: the screen says before approving that it still needs its own.
    refund_row = page.split('data-tool="issue_refund"')[1].split("</tr>")[0]
    assert "needs its own approval" in refund_row
    email_row = page.split('data-tool="send_customer_email"')[1].split("</tr>")[0]
    assert "needs its own approval" not in email_row
    assert 'id="approve-plan"' in page and 'id="reject-plan"' in page


def test_edit_and_approve_from_the_screen_removes_a_step_and_lowers_a_bound(bea, plan):
    response = client_for(bea).post(
        reverse("approvals:decide_plan", args=[plan.pk]),
        {
            "decision": "edit_approve",
            "value_1_0": "13",
            "value_1_1": "25.00",
            "value_2_0": "Your refund for order 13",
            "remove_2": "on",
        },
    )
    assert response.status_code == 200, response.content
    assert b"Plan approved with your edits" in response.content
    plan.refresh_from_db()
    assert plan.status == Approval.Status.APPROVED and plan.decided_by.username == "bea"
    steps = plan.edited_args["steps"]
    assert [s["tool"] for s in steps] == ["lookup_order", "issue_refund"]
    assert steps[1]["envelope"][1] == {"arg": "amount", "op": "lte", "value": "25.00"}
    # The proposal's types are kept: the order id stays a number.
    assert steps[1]["envelope"][0]["value"] == 13


def test_bad_edits_and_a_reason_less_rejection_are_422_and_decide_nothing(bea, plan):
    client = client_for(bea)
    url = reverse("approvals:decide_plan", args=[plan.pk])
    bad = client.post(url, {"decision": "edit_approve", "value_1_1": "lots"})
    assert bad.status_code == 422 and b"a number" in bad.content
    every = {f"remove_{i}": "on" for i in range(3)}
    assert client.post(url, {"decision": "edit_approve", **every}).status_code == 422
    assert client.post(url, {"decision": "reject"}).status_code == 422
    assert client.post(url, {"decision": "maybe"}).status_code == 422
    plan.refresh_from_db()
    assert plan.status == Approval.Status.PENDING


def test_rejecting_needs_the_approver_role(django_user_model, plan):
    viewer = make_user(django_user_model, "vic", "viewer")
    url = reverse("approvals:decide_plan", args=[plan.pk])
    assert client_for(viewer).post(url, {"decision": "reject", "reason": "no"}).status_code == 403
    plan.refresh_from_db()
    assert plan.status == Approval.Status.PENDING


def test_a_second_decision_is_a_conflict(bea, django_user_model, plan):
    url = reverse("approvals:decide_plan", args=[plan.pk])
    assert client_for(bea).post(url, {"decision": "approve"}).status_code == 200
    other = make_user(django_user_model, "cy", "approver")
    again = client_for(other).post(url, {"decision": "reject", "reason": "late"})
    assert again.status_code == 409 and b"already" in again.content


def test_the_run_page_loads_the_to_do_list_and_is_pushed_its_refresh(bea, plan):
    client = client_for(bea)
    run = plan.run
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    todo_url = reverse("approvals:run_plan", args=[run.pk])
    assert f'id="run-plan" hx-get="{todo_url}"' in page
    todo = client.get(todo_url).content.decode()
    assert todo.count('data-status="pending"') == 3 and 'data-state="proposed"' in todo
    # A step that moves the plan pushes a refresh of the list; an ordinary one does not.
    gate = run.steps.get(kind=Step.Kind.GATE)
    assert f'hx-get="{todo_url}"' in rendering.render_step_event(gate, run)["html"]
    first = run.steps.get(seq=1)
    assert "run-plan" not in rendering.render_step_event(first, run)["html"]


def test_the_to_do_list_is_only_for_those_who_may_see_the_run(django_user_model, plan):
    outsider = make_user(django_user_model, "out", "viewer")
    outsider.groups.clear()  # no role: sees no run
    response = client_for(outsider).get(reverse("approvals:run_plan", args=[plan.run_id]))
    assert response.status_code in (403, 404)


# --- the API --------------------------------------------------------------------------------------
def token_client(user) -> Client:
    _, raw = ApiToken.issue(user, "tests")
    return Client(headers={"Authorization": f"Bearer {raw}"})


def test_the_api_lists_a_runs_plans_and_decides_one_with_edited_steps(bea, plan):
    client = token_client(bea)
    listed = client.get(f"/api/runs/{plan.run_id}/plans").json()
    assert len(listed) == 1 and listed[0]["state"] == "proposed"
    # The approval's own detail leads to the plan.
    detail = client.get(f"/api/approvals/{plan.pk}").json()
    assert detail["kind"] == "plan" and detail["plan_id"] == listed[0]["id"]
    assert [s["status"] for s in listed[0]["steps"]] == ["pending"] * 3
    assert listed[0]["steps"][1]["needs_own_approval"].startswith("a high-risk call")
    plan_id = listed[0]["id"]
    steps = [s["planned"] for s in listed[0]["steps"]][:2]
    response = client.post(
        f"/api/plans/{plan_id}/decision",
        {"decision": "approve", "steps": steps, "shown_args_hash": listed[0]["arguments_hash"]},
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["state"] == "approved" and body["edited"] and body["decided_by"] == "bea"
    assert len(body["steps"]) == 2
    # Decided once: a second decision is a conflict.
    again = client.post(
        f"/api/plans/{plan_id}/decision", {"decision": "approve"}, content_type="application/json"
    )
    assert again.status_code == 409


def test_the_api_refuses_bad_plan_decisions_with_4xx(bea, django_user_model, plan):
    client = token_client(bea)
    plan_id = Plan.objects.get(approval=plan).pk
    url = f"/api/plans/{plan_id}/decision"
    added = [*plan.args["steps"], plan.args["steps"][0]]
    assert (
        client.post(
            url, {"decision": "approve", "steps": added}, content_type="application/json"
        ).status_code
        == 422
    )
    assert (
        client.post(url, {"decision": "reject"}, content_type="application/json").status_code == 422
    )
    assert (
        client.post(url, {"decision": "sure"}, content_type="application/json").status_code == 422
    )
    assert client.post(url, "not json", content_type="application/json").status_code in (400, 422)
    assert client.get("/api/plans/999999").status_code == 404
    viewer = token_client(make_user(django_user_model, "vee", "viewer"))
    assert (
        viewer.post(
            url, {"decision": "reject", "reason": "x"}, content_type="application/json"
        ).status_code
        == 403
    )
    plan.refresh_from_db()
    assert plan.status == Approval.Status.PENDING


def test_the_plans_api_is_in_the_openapi_description(bea):
    schema = token_client(bea).get("/api/openapi.json").json()
    assert "/api/plans/{plan_id}/decision" in schema["paths"]
    assert "/api/runs/{run_id}/plans" in schema["paths"]
