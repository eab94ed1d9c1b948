"""An agent's gate may HALT the run when nobody decides in time: the approval expires, the
run stays parked (not resumed, not failed) and says so, until an operator resumes it (the agent
is then told the call was not executed) or cancels it. The card says which outcome applies."""

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse

from accounts.models import ApiToken
from approvals import decisions
from approvals.gates import config as gate_config
from approvals.models import Approval
from runs.models import Run, Step

from . import grant_agents  # noqa: F401  (registers test-crediter)
from .conftest import EXECUTED, drive, gated

pytestmark = pytest.mark.django_db

CREDITS = {"to": "acme", "amounts": "10,20"}


def expire(approval: Approval) -> int:
    return decisions.expire_due(now=approval.expires_at + timedelta(seconds=1))


def test_an_expiry_halts_the_run_instead_of_resuming_it(no_enqueue):
    run, approval = gated("test-crediter", CREDITS, on_expiry="halt")
    assert approval.on_expiry == "halt"
    enqueued = list(no_enqueue)
    assert expire(approval) == 1
    run.refresh_from_db()
    approval.refresh_from_db()
    assert approval.status == Approval.Status.EXPIRED
    assert run.status == Run.Status.WAITING
    assert run.status_detail.startswith("halted: nobody decided test_credit by ")
    assert no_enqueue == enqueued  # nothing sent to a worker
    assert decisions.is_halted(run)
    last = run.steps.order_by("-seq").first()
    assert last.kind == Step.Kind.DECISION
    assert last.data["on_expiry"] == "halt"
    assert "the run halts until an operator resumes or cancels it" in last.data["detail"]
    # A later sweep changes nothing.
    assert expire(approval) == 0
    run.refresh_from_db()
    assert run.status == Run.Status.WAITING


def test_a_resumed_halt_tells_the_agent_and_goes_on(
    operator, no_enqueue, django_capture_on_commit_callbacks
):
    run, approval = gated("test-crediter", CREDITS, on_expiry="halt")
    expire(approval)
    with django_capture_on_commit_callbacks(execute=True):
        resumed = decisions.resume_halted(run.pk, user=operator)
    assert resumed.status == Run.Status.QUEUED
    assert no_enqueue[-1] == str(run.pk)
    assert drive(run) == Run.Status.WAITING  # the next credit is gated in turn
    told = run.steps.filter(kind=Step.Kind.TOOL).order_by("seq").first()
    assert "approval expired" in told.data["error"] and "not executed" in told.data["error"]
    assert EXECUTED == []
    assert Approval.objects.get(run=run, status="pending").args["amount"] == "20"
    assert not decisions.is_halted(run)


def test_only_operators_and_approvers_resume_and_only_once(viewer, operator, bea, no_enqueue):
    run, approval = gated("test-crediter", CREDITS, on_expiry="halt")
    expire(approval)
    with pytest.raises(decisions.DecisionForbidden):
        decisions.resume_halted(run.pk, user=viewer)
    decisions.resume_halted(run.pk, user=bea)
    with pytest.raises(decisions.DecisionConflict) as again:
        decisions.resume_halted(run.pk, user=operator)
    assert "not halted" in again.value.message


def test_a_run_waiting_for_a_person_is_not_halted(operator, no_enqueue):
    run, _ = gated("test-crediter", CREDITS, on_expiry="halt")
    with pytest.raises(decisions.DecisionConflict):
        decisions.resume_halted(run.pk, user=operator)


def test_the_default_expiry_still_resumes_the_run(no_enqueue):
    run, approval = gated("test-crediter", CREDITS)
    expire(approval)
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED


def test_the_card_says_the_run_halts_and_offers_to_resume_it(operator, bea, no_enqueue):
    run, approval = gated("test-crediter", CREDITS, on_expiry="halt")
    client = Client()
    client.force_login(bea)
    card = reverse("approvals:detail", args=[approval.pk])
    assert "it expires and the run halts" in client.get(card).content.decode()
    expire(approval)
    html = client.get(card).content.decode()
    assert 'id="halted"' in html and 'id="resume-halted"' in html
    resume = reverse("approvals:resume_halted", args=[approval.pk])
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(operator)
    assert strict.post(resume).status_code == 403
    response = client.post(resume)
    assert response.status_code == 302
    assert response.url == reverse("runs:detail", args=[run.pk])
    assert client.post(resume).status_code == 409
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED


def test_the_api_resumes_a_halted_run(operator, no_enqueue):
    run, approval = gated("test-crediter", CREDITS, on_expiry="halt")
    expire(approval)
    _, raw = ApiToken.issue(operator, "tests")
    client = Client(headers={"Authorization": f"Bearer {raw}"})
    path = f"/api/approvals/{approval.pk}/resume-halted"
    response = client.post(path)
    assert response.status_code == 200
    assert response.json() == {"run": str(run.pk), "status": "queued"}
    assert client.post(path).status_code == 409


def test_halt_is_an_outcome_the_gate_configuration_knows():
    snapshot = {"gates": {"on_expiry": "halt"}, "tools": []}
    assert gate_config.problems(snapshot) == []
    snapshot["gates"]["on_expiry"] = "explode"
    assert "reject or fail or halt" in gate_config.problems(snapshot)[0]
