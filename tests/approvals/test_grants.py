"""Standing grants (approvals/grants/models.py): an approver allows more than the call on the card,
within bounds; the gate lets matching calls through, each recorded as approved by the grant;
what a person must decide every time cannot be granted."""

import threading
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from approvals.evidence import export as evidence_export
from approvals.grants import models as grants
from approvals.grants.models import Bounds, GrantRefused
from approvals.models import Approval, Grant
from runs.models import Run, Step
from tests.conftest import make_user, on_postgres

from . import grant_agents  # noqa: F401  (registers test-crediter)
from .conftest import EXECUTED, drive, gated, launch

pytestmark = pytest.mark.django_db

RUN = Bounds(scope="run", envelope=[])


def credits(run: Run) -> list[str]:
    return [a["amount"] for name, a in EXECUTED if name == "test_credit"]


def test_envelope_matches_only_calls_within_every_bound():
    envelope = [
        {"arg": "amount", "op": "lte", "value": "50"},
        {"arg": "to", "op": "eq", "value": "acme"},
    ]
    assert grants.matches(envelope, {"amount": "50.00", "to": "acme"})
    assert grants.matches(envelope, {"amount": 12, "to": "acme"})
    assert not grants.matches(envelope, {"amount": "50.01", "to": "acme"})
    assert not grants.matches(envelope, {"amount": "10", "to": "globex"})
    # A bound is never bypassed by leaving the argument out or making it unreadable.
    assert not grants.matches(envelope, {"to": "acme"})
    assert not grants.matches(envelope, {"amount": "lots", "to": "acme"})
    assert not grants.matches([{"arg": "amount", "op": "gte", "value": 1}], {"amount": 5})
    assert grants.matches([], {"amount": "9999"})


def test_the_rest_of_the_run_runs_without_a_card_and_says_by_which_grant(bea, no_enqueue):
    run, first = gated("test-crediter", {"to": "acme", "amounts": "10,20,30"})
    made, approval = grants.grant(first.pk, user=bea, bounds=RUN)
    assert approval.status == Approval.Status.APPROVED
    assert approval.decided_by == bea

    assert drive(run) == Run.Status.SUCCEEDED
    assert credits(run) == ["10", "20", "30"]
    by_grant = Approval.objects.filter(run=run, grant=made).order_by("gate_seq")
    assert [a.args["amount"] for a in by_grant] == ["20", "30"]
    assert all(a.status == Approval.Status.APPROVED and a.decided_by is None for a in by_grant)
    assert by_grant[0].reason == f"approved by grant #{made.pk} (by bea)"
    gates = run.steps.filter(kind=Step.Kind.GATE, data__approved_by_grant=made.pk)
    assert gates.count() == 2
    assert {g.data["granted_by"] for g in gates} == {"bea"}
    made.refresh_from_db()
    assert made.uses == 2
    assert run.verify_chain() == (True, None)


def test_a_grant_for_one_run_does_not_reach_another(bea, no_enqueue):
    _run, first = gated("test-crediter", {"to": "acme", "amounts": "10,20"})
    grants.grant(first.pk, user=bea, bounds=RUN)
    other, _ = gated("test-crediter", {"to": "acme", "amounts": "10"})
    assert other.status == Run.Status.WAITING


def test_an_envelope_lets_small_calls_through_and_gates_the_rest(bea, no_enqueue):
    bounds = Bounds(
        scope="agent",
        envelope=grants.envelope_for("amount", "20"),
        expires_at=timezone.now() + timedelta(hours=1),
    )
    run, first = gated("test-crediter", {"to": "acme", "amounts": "10,20,25,5"})
    made, _ = grants.grant(first.pk, user=bea, bounds=bounds)
    assert drive(run) == Run.Status.WAITING
    pending = Approval.objects.get(run=run, status=Approval.Status.PENDING)
    assert pending.args["amount"] == "25"  # outside the envelope: a person decides
    assert pending.grant is None
    # And the agent's other runs are covered too, while it lasts.
    second, _ = gated("test-crediter", {"to": "globex", "amounts": "15,40"})
    assert Approval.objects.get(run=second, args__amount="15").grant == made


def test_an_expired_grant_lets_nothing_through(bea, no_enqueue):
    run, first = gated("test-crediter", {"to": "acme", "amounts": "10,20"})
    made, _ = grants.grant(
        first.pk,
        user=bea,
        bounds=Bounds(scope="agent", envelope=[], expires_at=timezone.now() + timedelta(hours=1)),
    )
    Grant.objects.filter(pk=made.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert drive(run) == Run.Status.WAITING
    assert Approval.objects.get(run=run, status=Approval.Status.PENDING).args["amount"] == "20"


def test_a_counted_grant_stops_at_its_count(bea, no_enqueue):
    run, first = gated("test-crediter", {"to": "acme", "amounts": "10,20,30,40"})
    made, _ = grants.grant(first.pk, user=bea, bounds=Bounds("agent", [], max_uses=2))
    assert drive(run) == Run.Status.WAITING
    assert Approval.objects.get(run=run, status=Approval.Status.PENDING).args["amount"] == "40"
    made.refresh_from_db()
    assert made.uses == made.max_uses == 2
    assert not grants.is_active(made)


def test_a_revoked_grant_gates_the_next_call_again(bea, dan, no_enqueue):
    run, first = gated("test-crediter", {"to": "acme", "amounts": "10,20"})
    made, _ = grants.grant(first.pk, user=bea, bounds=RUN)
    revoked = grants.revoke(made.pk, user=dan)
    assert revoked.revoked_by_name == "dan"
    assert drive(run) == Run.Status.WAITING
    assert Approval.objects.get(run=run, status=Approval.Status.PENDING).grant is None
    with pytest.raises(GrantRefused) as again:
        grants.revoke(made.pk, user=bea)
    assert again.value.status == 409
    assert "already revoked by dan" in again.value.message


def test_high_risk_calls_cannot_be_granted(bea, no_enqueue):
    # test_transfer is irreversible with a high blast radius.
    _run, approval = gated("test-payer", {"to": "acme", "amount": "800.00"})
    assert approval.risk == "high"
    assert "high-risk call needs a person's decision every time" in grants.refusal(approval)
    with pytest.raises(GrantRefused) as refused:
        grants.grant(approval.pk, user=bea, bounds=RUN)
    assert refused.value.status == 422
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING  # nothing was approved either
    assert not Grant.objects.exists()


def test_four_eyes_calls_cannot_be_granted(bea, no_enqueue):
    _, approval = gated("test-crediter", {"to": "acme", "amounts": "10"}, four_eyes_from="medium")
    assert "four-eyes rule" in grants.refusal(approval)
    with pytest.raises(GrantRefused):
        grants.grant(approval.pk, user=bea, bounds=RUN)


def test_the_gate_ignores_a_grant_for_a_call_that_became_four_eyes(bea, no_enqueue):
    # Granted while the rule did not reach medium; a grant row made any other way (an admin,
    # an older rule) must still not let a call through that the four-eyes rule covers.
    run, first = gated("test-crediter", {"to": "acme", "amounts": "10,20"})
    made, _ = grants.grant(first.pk, user=bea, bounds=RUN)
    config = run.agent_config
    config["gates"]["four_eyes_from"] = "medium"
    Run.objects.filter(pk=run.pk).update(agent_config=config)
    assert drive(run) == Run.Status.WAITING
    made.refresh_from_db()
    assert made.uses == 0


def test_an_approver_who_may_not_decide_the_call_may_not_grant(django_user_model, no_enqueue):
    named = make_user(django_user_model, "nina", "approver")
    other = make_user(django_user_model, "otto", "approver")
    viewer = make_user(django_user_model, "vic", "viewer")
    _run, approval = gated("test-crediter", {"to": "acme", "amounts": "10"}, approvers=["nina"])
    with pytest.raises(GrantRefused) as refused:
        grants.grant(approval.pk, user=other, bounds=RUN)
    assert refused.value.status == 403
    with pytest.raises(GrantRefused) as refused:
        grants.grant(approval.pk, user=viewer, bounds=RUN)
    assert refused.value.status == 403
    made, _ = grants.grant(approval.pk, user=named, bounds=RUN)
    assert made.granted_by_name == "nina"


@pytest.mark.parametrize(
    "bounds, field",
    [
        (Bounds("agent", []), "scope"),  # unbounded
        (Bounds("agent", [], max_uses=0), "max_uses"),
        (Bounds("agent", [], max_uses=5000), "max_uses"),
        (Bounds("agent", [], expires_at=timezone.now() - timedelta(minutes=1)), "expires_at"),
        (Bounds("agent", [], expires_at=timezone.now() + timedelta(days=30)), "expires_at"),
        (Bounds("forever", []), "scope"),
        (Bounds("run", [{"arg": "colour", "op": "eq", "value": "red"}]), "envelope.colour"),
        (Bounds("run", [{"arg": "amount", "op": "lte", "value": "lots"}]), "envelope.amount"),
        (Bounds("run", [{"arg": "amount"}]), "envelope"),
    ],
)
def test_a_grant_out_of_bounds_is_refused_field_by_field(bea, no_enqueue, bounds, field):
    _run, approval = gated("test-crediter", {"to": "acme", "amounts": "10"})
    with pytest.raises(GrantRefused) as refused:
        grants.grant(approval.pk, user=bea, bounds=bounds)
    assert field in refused.value.errors
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING
    assert not Grant.objects.exists()


def test_a_run_grant_ends_with_its_run(bea, no_enqueue):
    run, first = gated("test-crediter", {"to": "acme", "amounts": "10"})
    made, _ = grants.grant(first.pk, user=bea, bounds=RUN)
    assert grants.is_active(made)
    assert drive(run) == Run.Status.SUCCEEDED
    assert not grants.is_active(made)


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_two_workers_never_both_use_the_last_allowance(bea, django_user_model, no_enqueue):
    """Eight runs, gated at once, race for a grant with two calls left: exactly two get
    through, the grant's count never passes its cap."""
    racers = 8
    _first_run, first = gated("test-crediter", {"to": "acme", "amounts": "1"})
    made, _ = grants.grant(first.pk, user=bea, bounds=Bounds("agent", [], max_uses=2))
    runs = [launch("test-crediter", {"to": f"c{i}", "amounts": "5"}) for i in range(racers)]
    start = threading.Barrier(racers)
    errors: list[BaseException] = []

    def race(run: Run) -> None:
        try:
            start.wait()
            drive(run)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=race, args=(r,)) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    made.refresh_from_db()
    assert made.uses == 2
    by_grant = Approval.objects.filter(grant=made)
    assert by_grant.count() == 2
    statuses = sorted(Run.objects.get(pk=r.pk).status for r in runs)
    assert statuses == sorted(["succeeded"] * 2 + ["waiting"] * (racers - 2))
    assert Approval.objects.filter(run__in=runs, status="pending").count() == racers - 2


def test_the_audit_export_says_under_which_grant_each_call_ran(bea, no_enqueue):
    run, first = gated("test-crediter", {"to": "acme", "amounts": "10,20"})
    made, _ = grants.grant(first.pk, user=bea, bounds=RUN)
    drive(run)
    now = timezone.now()
    found = list(
        evidence_export.records(since=now - timedelta(hours=1), until=now + timedelta(hours=1))
    )
    by_person = next(r for r in found if r["approval"] == str(first.pk))
    assert (by_person["decision"], by_person["decided_by"]) == ("approve", "bea")
    auto = Approval.objects.get(grant=made)
    by_grant = next(r for r in found if r["approval"] == str(auto.pk))
    assert by_grant["decision"] == "grant_approve"
    assert by_grant["decided_by"] == "bea"
    assert by_grant["authority"] == f"standing grant #{made.pk} (by bea)"
    assert by_grant["via"] == "grant"
    gate = run.steps.get(kind=Step.Kind.GATE, data__approval=str(auto.pk))
    assert (by_grant["step_seq"], by_grant["step_hash"]) == (gate.seq, gate.hash)


@pytest.mark.skipif(
    settings.IS_POSTGRES, reason="Postgres refuses deleting decided approvals (audit triggers)"
)
def test_a_run_with_calls_its_own_grant_approved_can_still_be_deleted(bea, no_enqueue):
    run, first = gated("test-crediter", {"to": "acme", "amounts": "10,20"})
    made, _ = grants.grant(first.pk, user=bea, bounds=RUN)
    drive(run)
    assert Approval.objects.filter(grant=made).exists()
    run.delete()
    assert not Grant.objects.filter(pk=made.pk).exists()


def test_looking_for_a_grant_costs_one_query_and_using_one_two(
    bea, no_enqueue, django_assert_num_queries
):
    run, first = gated("test-crediter", {"to": "acme", "amounts": "10,20"})
    item = {"args": {"to": "acme", "amount": "20"}}
    gate = {"kind": "action", "tool": "test_credit", "risk": "medium"}
    with django_assert_num_queries(1):
        assert grants.use_for(run, item, gate) is None
    grants.grant(first.pk, user=bea, bounds=RUN)
    with django_assert_num_queries(2):  # the candidates, then the compare-and-set
        assert grants.use_for(run, item, gate) is not None
    with django_assert_num_queries(0):  # what may never be granted is not even looked up
        assert grants.use_for(run, item, {**gate, "risk": "high"}) is None
