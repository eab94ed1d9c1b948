"""The rules page and the post-hoc review queue: who may do what, bad input, and what a
"should have been gated" verdict sets off."""

from datetime import timedelta

import pytest
from django.core import mail
from django.urls import reverse
from django.utils import timezone

from approvals.learning import review
from approvals.learning import rules as learning
from approvals.models import Approval, AutoApproveRule, GateOverride, PostHocReview
from runs.models import Run, Step
from tests.conftest import make_user

from ..conftest import drive, launch
from .test_rules import LEARNS, approve_credits, credit_run

pytestmark = pytest.mark.django_db


def learning_objects(run: Run) -> dict:
    """A proposed rule, a review of one of the run's steps and an override (the security
    matrix's world)."""
    rule = AutoApproveRule.objects.create(
        agent=run.agent, tool="email_report", pattern=[], pattern_key=learning.key([])
    )
    rule.events.create(from_status="", to_status="proposed", cause="test")
    step = run.steps.get(seq=1)
    posthoc = PostHocReview.objects.create(
        run=run, step=step, agent=run.agent, tool="email_report", args={"to": "x"}
    )
    override = GateOverride.objects.create(agent=run.agent, tool="email_report", review=posthoc)
    return {"rule": rule, "review": posthoc, "override": override}


@pytest.fixture
def admin(django_user_model):
    return make_user(django_user_model, "adele", "admin")


@pytest.fixture
def proposed(approver, no_enqueue) -> AutoApproveRule:
    approve_credits(approver, 3)
    return AutoApproveRule.objects.get()


def test_the_page_shows_evidence_and_history_but_no_buttons_to_a_viewer(client, viewer, proposed):
    client.force_login(viewer)
    page = client.get(reverse("approvals:rules")).content.decode()
    assert f"Rule #{proposed.pk}" in page
    assert "amount &lt;= 25, reason = &#x27;late delivery&#x27;" in page
    assert "3 consecutive approvals without an edit" in page
    assert page.count("Goodwill credit of 15 to ann@example.com") == 3
    assert "Accept rule" not in page


def test_an_admin_accepts_with_expiry_and_cap(client, admin, proposed):
    client.force_login(admin)
    response = client.post(
        reverse("approvals:accept_rule", args=[proposed.pk]),
        {"expires_in_days": "2", "max_hits": "7"},
    )
    assert response.status_code == 302
    proposed.refresh_from_db()
    assert proposed.status == "active" and proposed.max_hits == 7
    assert proposed.accepted_by == admin
    assert timedelta(days=1) < proposed.expires_at - timezone.now() <= timedelta(days=2)
    event = proposed.events.last()
    assert event.to_status == "active" and event.by == admin


@pytest.mark.parametrize(
    "form", [{}, {"expires_in_days": "0", "max_hits": "5"}, {"expires_in_days": "x"}]
)
def test_bad_scope_is_a_message_not_an_acceptance(client, admin, proposed, form):
    client.force_login(admin)
    response = client.post(reverse("approvals:accept_rule", args=[proposed.pk]), form, follow=True)
    assert response.status_code == 200
    assert "give an expiry" in response.content.decode()
    proposed.refresh_from_db()
    assert proposed.status == "proposed"


def test_approvers_cannot_accept(client, approver, proposed):
    client.force_login(approver)
    url = reverse("approvals:accept_rule", args=[proposed.pk])
    assert client.post(url, {"expires_in_days": "1", "max_hits": "1"}).status_code == 403
    proposed.refresh_from_db()
    assert proposed.status == "proposed"


def test_a_manual_revocation_needs_a_reason(client, admin, proposed):
    learning.accept(proposed, by=admin, expires_at=timezone.now() + timedelta(1), max_hits=5)
    client.force_login(admin)
    url = reverse("approvals:revoke_rule", args=[proposed.pk])
    client.post(url, {"reason": " "})
    proposed.refresh_from_db()
    assert proposed.status == "active"
    client.post(url, {"reason": "the customer base changed"})
    proposed.refresh_from_db()
    assert proposed.status == "revoked" and "the customer base changed" in proposed.cause


def test_a_declined_proposal_must_be_earned_again(client, admin, approver, proposed):
    client.force_login(admin)
    client.post(reverse("approvals:decline_rule", args=[proposed.pk]), {"reason": "too early"})
    proposed.refresh_from_db()
    assert proposed.status == "declined"
    approve_credits(approver, 2)
    assert AutoApproveRule.objects.filter(status="proposed").count() == 0
    approve_credits(approver, 1)
    assert AutoApproveRule.objects.filter(status="proposed").count() == 1


# --- post-hoc review ----------------------------------------------------------------------------


@pytest.fixture
def ran_by_rule(proposed, admin, no_enqueue) -> Run:
    learning.accept(proposed, by=admin, expires_at=timezone.now() + timedelta(1), max_hits=50)
    run = credit_run()
    assert drive(run) == Run.Status.SUCCEEDED
    return run


def test_the_queue_samples_calls_no_person_approved(ran_by_rule, approver, monkeypatch):
    # A call a person approved is not reviewable; one the rule approved is.
    assert review.refresh_queue() == 1
    queued = PostHocReview.objects.get()
    assert queued.run == ran_by_rule and queued.rule_id is not None
    assert queued.step.kind == Step.Kind.TOOL
    assert review.refresh_queue() == 0  # once


def test_the_draw_is_stable_and_even():
    ranks = [review.rank(pk) for pk in range(2000)]
    assert ranks == [review.rank(pk) for pk in range(2000)]
    assert 300 < sum(r < 0.2 for r in ranks) < 500  # about 20 % below 0.2


def test_should_have_been_gated_is_an_incident(
    client, ran_by_rule, approver, admin, monkeypatch, django_capture_on_commit_callbacks, eager
):
    admin.email = "adele@example.com"
    admin.save()
    client.force_login(approver)
    client.get(reverse("approvals:review"))
    queued = PostHocReview.objects.get()
    url = reverse("approvals:review_call", args=[queued.pk])
    client.post(url, {"verdict": "should_have_been_gated", "reason": ""})
    queued.refresh_from_db()
    assert queued.verdict == "pending"  # a reason is required
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        client.post(url, {"verdict": "should_have_been_gated", "reason": "VIP customer"})
    queued.refresh_from_db()
    assert queued.is_incident and queued.reviewer == approver
    rule = AutoApproveRule.objects.get()
    assert rule.status == "revoked" and "VIP customer" in rule.cause
    assert GateOverride.objects.filter(tool="grant_goodwill_credit", cleared_at=None).exists()
    subjects = [m.subject for m in mail.outbox if "adele@example.com" in m.to]
    assert any("Incident" in s for s in subjects) and any("revoked" in s for s in subjects)
    dashboard = client.get(reverse("runs:dashboard")).content.decode()
    assert "Policy incidents" in dashboard and "VIP customer" in dashboard
    # A second verdict on the same call is refused.
    response = client.post(url, {"verdict": "fine"}, follow=True)
    assert "already reviewed" in response.content.decode()


def test_an_override_gates_even_calls_the_policy_lets_run(
    ran_by_rule, approver, admin, monkeypatch, client
):
    review.refresh_queue()
    queued = PostHocReview.objects.get()
    review.record_verdict(queued.pk, user=approver, verdict="should_have_been_gated", reason="r")
    # Never-gate the tool for this run: the policy alone would let it run; the override gates.
    run = launch(
        "goodwill-desk",
        {"customer_email": "b@example.com", "amount": "15", "reason": "late delivery"},
        learning=LEARNS,
        never_gate=["grant_goodwill_credit"],
    )
    assert drive(run) == Run.Status.WAITING
    assert "should have been gated" in Approval.objects.get(run=run).explanation
    client.force_login(admin)
    override = GateOverride.objects.get()
    client.post(reverse("approvals:clear_override", args=[override.pk]))
    run = launch(
        "goodwill-desk",
        {"customer_email": "c@example.com", "amount": "15", "reason": "late delivery"},
        learning=LEARNS,
        never_gate=["grant_goodwill_credit"],
    )
    assert drive(run) == Run.Status.SUCCEEDED
