"""Racing decisions: exactly one wins, the rest get 409, the run resumes and executes once."""

import threading

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from agentkit.agents import get_agent
from approvals import decisions
from approvals.decisions import DecisionConflict
from approvals.models import Approval, ApprovalVote
from approvals.notify.one_tap import links as one_tap
from demo.models import Refund
from runs import engine
from runs.models import Run, SideEffect, Step, args_hash
from tests.conftest import make_user, on_postgres

RACERS = 20


def _refund_waiting_for_approval(operator) -> tuple[Run, Approval]:
    agent = get_agent("refund-desk")
    data, errors = agent.validate_input({"order_id": 42, "amount": "10.00", "reason": "damaged"})
    assert not errors
    run = engine.launch(agent=agent, input=data, launched_by=operator, provider="scripted")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    approval = Approval.objects.get(run=run, status=Approval.Status.PENDING)
    assert approval.tool == "issue_refund"
    return run, approval


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_decisions_one_wins_one_resume_one_refund(
    operator, django_user_model, no_enqueue
):
    run, approval = _refund_waiting_for_approval(operator)
    users = [make_user(django_user_model, f"racer{i}", "approver") for i in range(RACERS)]
    start = threading.Barrier(RACERS)
    outcomes: list[tuple[str, str]] = []
    lock = threading.Lock()

    def race(user, decision: str) -> None:
        try:
            start.wait()
            try:
                decisions.decide(approval.pk, user=user, decision=decision, reason="race")
                result = ("won", user.username)
            except DecisionConflict as exc:
                result = ("409", exc.message)
            with lock:
                outcomes.append(result)
        finally:
            connection.close()  # each thread's own connection back to the pool

    # Half approve, half reject: whichever wins, exactly one decision applies.
    threads = [
        threading.Thread(target=race, args=(u, "approve" if i % 2 else "reject"))
        for i, u in enumerate(users)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)

    winners = [who for kind, who in outcomes if kind == "won"]
    conflicts = [msg for kind, msg in outcomes if kind == "409"]
    assert len(outcomes) == RACERS
    assert len(winners) == 1
    assert len(conflicts) == RACERS - 1
    approval.refresh_from_db()
    assert approval.decided_by.username == winners[0]
    assert all(m.startswith(f"already {approval.status} by {winners[0]} at ") for m in conflicts)
    assert ApprovalVote.objects.filter(approval=approval).count() == 1
    assert run.steps.filter(kind=Step.Kind.DECISION).count() == 1
    assert no_enqueue == [str(run.pk)] * 2  # launch + exactly one resume

    engine.advance(run.pk, time_slice=30)
    refunds = Refund.objects.filter(run_id=run.pk).count()
    if approval.status == Approval.Status.APPROVED:
        assert refunds == 1
        assert SideEffect.objects.filter(run=run, tool="issue_refund").count() == 1
    else:
        assert refunds == 0
    run.refresh_from_db()
    assert run.verify_chain() == (True, None)


@pytest.mark.django_db(transaction=True)
def test_repeated_decisions_in_sequence_apply_once(operator, django_user_model, no_enqueue):
    """The same guarantee without threads (SQLite serialises writers anyway)."""
    run, approval = _refund_waiting_for_approval(operator)
    users = [make_user(django_user_model, f"clicker{i}", "approver") for i in range(RACERS)]
    results = []
    for user in users:
        try:
            decisions.decide(approval.pk, user=user, decision="approve")
            results.append("won")
        except DecisionConflict:
            results.append("409")
    assert results == ["won"] + ["409"] * (RACERS - 1)
    assert no_enqueue == [str(run.pk)] * 2
    engine.advance(run.pk, time_slice=30)
    assert Refund.objects.filter(run_id=run.pk).count() == 1


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_two_simultaneous_taps_of_one_link_decide_once_and_the_other_gets_410(
    operator, approver, no_enqueue, monkeypatch
):
    run, approval = _refund_waiting_for_approval(operator)
    token = one_tap.token_for(approval, approver)
    shown = args_hash(approval.tool, approval.args)
    # Both taps are inside their decision's transaction before either marks the link used:
    # only the compare-and-set in consume() can tell them apart.
    both_in = threading.Barrier(2, timeout=30)
    consume = one_tap.consume

    def consume_together(link):
        both_in.wait()
        consume(link)

    monkeypatch.setattr(one_tap, "consume", consume_together)
    statuses: list[int] = []

    def tap() -> None:
        try:
            client = Client()
            client.force_login(approver)
            response = client.post(
                reverse("approvals:one_tap", args=[token]),
                {"decision": "approve", "password": "pw-arthur", "shown_args_hash": shown},
            )
            statuses.append(response.status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=tap) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)

    assert sorted(statuses) == [200, 410]
    approval.refresh_from_db()
    assert approval.status == Approval.Status.APPROVED and approval.decided_by == approver
    assert ApprovalVote.objects.filter(approval=approval).count() == 1
    assert run.steps.filter(kind=Step.Kind.DECISION).count() == 1
    assert no_enqueue == [str(run.pk)] * 2  # launch + exactly one resume
