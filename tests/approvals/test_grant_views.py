"""The grant form on the approval card, the grants page, revoking, and resuming a halted run:
role-checked, CSRF-protected, bad input a form error (never a 500), nothing half-done."""

import pytest
from django.test import Client
from django.urls import reverse

from approvals import decisions
from approvals.grants import models as grants
from approvals.models import Approval, Grant
from runs.models import Run

from . import grant_agents  # noqa: F401  (registers test-crediter)
from .conftest import drive, gated

pytestmark = pytest.mark.django_db


def client_for(user, **kwargs) -> Client:
    client = Client(**kwargs)
    client.force_login(user)
    return client


def grant_url(approval: Approval) -> str:
    return reverse("approvals:grant", args=[approval.pk])


@pytest.fixture
def credit(no_enqueue) -> tuple[Run, Approval]:
    return gated("test-crediter", {"to": "acme", "amounts": "10,20,30"})


def test_the_card_offers_a_grant_and_shows_what_happens_at_expiry(bea, credit):
    _, approval = credit
    page = client_for(bea).get(reverse("approvals:detail", args=[approval.pk]))
    html = page.content.decode()
    assert 'id="grant-form"' in html
    assert "Allow this tool for the rest of this run" in html
    assert '<option value="amount" selected>amount</option>' in html
    assert "the call is not executed, and the agent is told so" in html
    assert "No active grant lets calls like this through" in html


def test_the_card_says_why_a_high_risk_call_cannot_be_granted(bea, no_enqueue):
    _, approval = gated("test-payer", {"to": "acme", "amount": "800.00"})
    html = client_for(bea).get(reverse("approvals:detail", args=[approval.pk])).content.decode()
    assert 'id="grant-form"' not in html
    assert 'id="grant-refused"' in html
    assert "high-risk call needs a person" in html


def test_granting_the_rest_of_the_run_approves_and_lets_the_next_calls_through(bea, credit):
    run, approval = credit
    response = client_for(bea).post(
        grant_url(approval), {"kind": "run", "shown_args_hash": approval.args_hash}
    )
    assert response.status_code == 302
    made = Grant.objects.get()
    assert (made.scope, made.run_id, made.granted_by_name) == ("run", run.pk, "bea")
    approval.refresh_from_db()
    assert approval.status == Approval.Status.APPROVED
    assert drive(run) == Run.Status.SUCCEEDED
    assert Approval.objects.filter(grant=made).count() == 2
    # The card of a call the grant approved says so.
    auto = Approval.objects.filter(grant=made).first()
    html = client_for(bea).get(reverse("approvals:detail", args=[auto.pk])).content.decode()
    assert f"by grant #{made.pk} (by bea)" in html


def test_an_envelope_and_a_count_from_the_form(bea, credit):
    _, approval = credit
    response = client_for(bea).post(
        grant_url(approval), {"kind": "envelope", "arg": "amount", "bound": "25", "minutes": "60"}
    )
    assert response.status_code == 302
    made = Grant.objects.get()
    assert made.envelope == [{"arg": "amount", "op": "lte", "value": "25"}]
    assert made.scope == "agent" and made.expires_at is not None and made.max_uses is None


def test_a_count_from_the_form(bea, credit):
    _, approval = credit
    assert (
        client_for(bea).post(grant_url(approval), {"kind": "count", "uses": "3"}).status_code == 302
    )
    assert Grant.objects.get().max_uses == 3


@pytest.mark.parametrize(
    "data, error",
    [
        ({"kind": "envelope", "arg": "amount", "minutes": "60"}, "give the largest value allowed"),
        ({"kind": "envelope", "arg": "to", "bound": "5", "minutes": "60"}, "Select a valid choice"),
        ({"kind": "count", "uses": "0"}, "greater than or equal to 1"),
        ({"kind": "count", "uses": "lots"}, "Enter a whole number"),
        ({"kind": "forever"}, "Select a valid choice"),
        ({"kind": "envelope", "arg": "amount", "bound": "1e999", "minutes": "9"}, "Select a valid"),
    ],
)
def test_bad_grant_input_is_a_form_error_and_changes_nothing(bea, credit, data, error):
    _, approval = credit
    response = client_for(bea).post(grant_url(approval), data)
    assert response.status_code == 422
    assert error in response.content.decode()
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING
    assert not Grant.objects.exists()


def test_a_high_risk_grant_posted_anyway_is_refused(bea, no_enqueue):
    _, approval = gated("test-payer", {"to": "acme", "amount": "800.00"})
    response = client_for(bea).post(grant_url(approval), {"kind": "run"})
    assert response.status_code == 422
    assert "high-risk call needs a person" in response.content.decode()
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING
    assert not Grant.objects.exists()


def test_a_grant_of_another_call_than_the_one_shown_is_refused(bea, credit):
    _, approval = credit
    response = client_for(bea).post(grant_url(approval), {"kind": "run", "shown_args_hash": "x"})
    assert response.status_code == 409
    assert not Grant.objects.exists()


def test_only_approvers_grant_and_only_with_the_csrf_token(bea, operator, viewer, credit):
    _, approval = credit
    assert client_for(viewer).post(grant_url(approval), {"kind": "run"}).status_code == 403
    assert client_for(operator).post(grant_url(approval), {"kind": "run"}).status_code == 403
    strict = client_for(bea, enforce_csrf_checks=True)
    assert strict.post(grant_url(approval), {"kind": "run"}).status_code == 403
    assert client_for(bea).get(grant_url(approval)).status_code == 405
    assert not Grant.objects.exists()


def test_the_grants_page_lists_and_revokes(bea, dan, viewer, credit):
    _, approval = credit
    made, _ = grants.grant(approval.pk, user=bea, bounds=grants.Bounds("agent", [], max_uses=5))
    page = client_for(dan).get(reverse("approvals:grants"))
    assert page.status_code == 200
    html = page.content.decode()
    assert f'id="grant-{made.pk}"' in html and 'data-state="active"' in html
    assert "0 of 5 calls used" in html
    assert client_for(viewer).get(reverse("approvals:grants")).status_code == 403
    revoke = reverse("approvals:revoke_grant", args=[made.pk])
    assert client_for(viewer).post(revoke).status_code == 403
    assert client_for(dan, enforce_csrf_checks=True).post(revoke).status_code == 403
    response = client_for(dan).post(revoke)
    assert response.status_code == 302
    made.refresh_from_db()
    assert made.revoked_by_name == "dan"
    html = client_for(dan).get(reverse("approvals:grants")).content.decode()
    assert "revoked by dan" in html
    # Twice is harmless; an unknown grant is a 404.
    assert client_for(dan).post(revoke).status_code == 302
    missing = reverse("approvals:revoke_grant", args=[made.pk + 100])
    assert client_for(dan).post(missing).status_code == 404


def test_revoking_from_the_card_goes_back_to_the_card(bea, credit):
    _, approval = credit
    made, _ = grants.grant(approval.pk, user=bea, bounds=grants.Bounds("agent", [], max_uses=5))
    card = reverse("approvals:detail", args=[approval.pk])
    html = client_for(bea).get(card).content.decode()
    assert f'data-grant-id="{made.pk}"' in html
    revoke = reverse("approvals:revoke_grant", args=[made.pk])
    assert client_for(bea).post(revoke, {"next": card}).url == card
    assert client_for(bea).post(revoke, {"next": "https://evil.example/"}).url == reverse(
        "approvals:grants"
    )


def test_a_grant_from_an_approval_already_decided_is_refused_with_why(bea, dan, credit):
    _, approval = credit
    decisions.decide(approval.pk, user=dan, decision="approve")
    response = client_for(bea).post(
        grant_url(approval), {"kind": "run", "shown_args_hash": approval.args_hash}
    )
    assert response.status_code == 409
    html = response.content.decode()
    assert 'id="grant-result"' in html
    assert "already approved by dan" in html and "only while deciding a pending call" in html
    assert not Grant.objects.exists()
