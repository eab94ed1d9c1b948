"""The decision service end to end: decisions drive real scripted runs through the engine."""

from datetime import timedelta

import pytest
from django.utils import timezone

from approvals import decisions
from approvals.decisions import DecisionConflict, DecisionForbidden, DecisionInvalid
from approvals.models import Approval, ApprovalVote
from runs.engine import lease
from runs.models import Run, SideEffect, Step, args_hash, canonical_json
from tests.conftest import make_user
from tests.runs.harness import tamper

from .conftest import EXECUTED, drive, gated, launch

pytestmark = pytest.mark.django_db(transaction=True)

BIG = {"to": "acme", "amount": "800.00"}  # over the 500 threshold: gated with a reason


def decision_steps(run: Run) -> list[dict]:
    return list(run.steps.filter(kind=Step.Kind.DECISION).values_list("data", flat=True))


def test_approve_executes_the_call_once_and_the_run_finishes(operator, approver, no_enqueue):
    run, approval = gated("test-payer", BIG, by=operator)
    assert "exceeds" in approval.explanation and "500" in approval.explanation
    assert EXECUTED == []
    assert no_enqueue == [str(run.pk)]

    decided = decisions.decide(approval.pk, user=approver, decision="approve")

    assert decided.status == Approval.Status.APPROVED
    assert decided.decided_by == approver
    assert decided.approved_args_hash == args_hash("test_transfer", approval.args)
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED
    assert no_enqueue == [str(run.pk)] * 2  # launch + one resume
    step = decision_steps(run)[0]
    assert step["by"] == "arthur" and step["decision"] == "approve"
    assert step["args"] == approval.args and step["edited_args"] is None

    assert drive(run) == Run.Status.SUCCEEDED
    assert EXECUTED == [("test_transfer", {"to": "acme", "amount": "800.00"})]
    assert SideEffect.objects.filter(run=run, status=SideEffect.Status.COMMITTED).count() == 1
    assert run.verify_chain() == (True, None)


def test_reject_never_runs_the_tool_and_the_agent_gets_the_reason(operator, approver, no_enqueue):
    run, approval = gated("test-payer", BIG, by=operator)

    decisions.decide(approval.pk, user=approver, decision="reject", reason="vendor is on hold")

    assert drive(run) == Run.Status.SUCCEEDED
    assert EXECUTED == []
    tool_step = run.steps.get(kind=Step.Kind.TOOL)
    assert tool_step.data["is_error"] is True
    assert "rejected by arthur: vendor is on hold" in tool_step.data["error"]
    # The model's next turn saw the rejection as the tool result.
    assert "vendor is on hold" in run.output
    assert not SideEffect.objects.filter(run=run).exists()


def test_reject_with_fail_run_policy_fails_the_run_with_the_reason(operator, approver, no_enqueue):
    run, approval = gated("test-wiper", {"to": "prod", "amount": "1"}, by=operator)

    decisions.decide(approval.pk, user=approver, decision="reject", reason="never wipe prod")

    assert drive(run) == Run.Status.FAILED
    assert EXECUTED == []
    assert run.termination_reason == Run.Termination.REJECTED
    assert "never wipe prod" in run.status_detail


def test_reject_needs_a_reason(operator, approver, no_enqueue):
    _run, approval = gated("test-payer", BIG, by=operator)
    with pytest.raises(DecisionInvalid) as exc:
        decisions.decide(approval.pk, user=approver, decision="reject", reason="  ")
    assert "reason" in exc.value.errors
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING
    assert not ApprovalVote.objects.exists()


def test_sequential_double_decision_second_gets_409_with_who_and_when(
    operator, approver, django_user_model, no_enqueue
):
    run, approval = gated("test-payer", BIG, by=operator)
    others = [make_user(django_user_model, f"appr{i}", "approver") for i in range(19)]
    decisions.decide(approval.pk, user=approver, decision="approve")
    losers = 0
    for user in others:
        with pytest.raises(DecisionConflict) as exc:
            decisions.decide(approval.pk, user=user, decision="reject", reason="too late")
        assert exc.value.message.startswith("already approved by arthur at 20")
        assert exc.value.decided_by == "arthur"
        losers += 1
    assert losers == 19
    assert no_enqueue == [str(run.pk)] * 2
    assert ApprovalVote.objects.filter(approval=approval).count() == 1
    drive(run)
    assert len(EXECUTED) == 1


def test_edit_within_limits_executes_exactly_the_edited_arguments(operator, approver, no_enqueue):
    run, approval = gated("test-payer", BIG, by=operator)

    decided = decisions.decide(
        approval.pk, user=approver, decision="approve", arguments={"to": "globex", "amount": "450"}
    )

    edited = {"to": "globex", "amount": "450"}
    assert decided.edited_args == edited
    assert decided.args == {"to": "acme", "amount": "800.00"}
    assert decided.approved_args_hash == args_hash("test_transfer", edited)
    step = decision_steps(run)[0]
    assert step["args"] == {"to": "acme", "amount": "800.00"}
    assert step["edited_args"] == edited
    assert ApprovalVote.objects.get().edited is True
    drive(run)
    assert EXECUTED == [("test_transfer", {"to": "globex", "amount": "450"})]
    tool_step = run.steps.get(kind=Step.Kind.TOOL)
    assert tool_step.data["is_error"] is False
    assert tool_step.data["args"] == edited  # the timeline shows what actually ran


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"to": "acme", "amount": "5000"}, "amount 5000 exceeds the limit of 500"),
        ({"to": "mallory", "amount": "800.00"}, "to 'mallory' is not on the allow-list"),
    ],
)
def test_edit_that_policy_would_gate_harder_is_refused(
    operator, approver, no_enqueue, arguments, problem
):
    run, approval = gated("test-payer", BIG, by=operator)

    with pytest.raises(DecisionInvalid) as exc:
        decisions.decide(approval.pk, user=approver, decision="approve", arguments=arguments)

    assert exc.value.message.startswith("edit refused")
    assert any(problem in p for p in exc.value.errors["arguments"])
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING and approval.edited_args is None
    assert decision_steps(run) == []
    assert no_enqueue == [str(run.pk)]
    # The approver can still approve what was proposed; exactly that runs.
    decisions.decide(approval.pk, user=approver, decision="approve")
    drive(run)
    assert EXECUTED == [("test_transfer", {"to": "acme", "amount": "800.00"})]


def test_edit_pushing_a_small_call_over_the_limit_is_refused(operator, approver, no_enqueue):
    _run, approval = gated("test-payer", {"to": "acme", "amount": "20"}, by=operator)
    assert "exceeds" not in approval.explanation  # gated by the table only (irreversible, high)
    with pytest.raises(DecisionInvalid) as exc:
        decisions.decide(
            approval.pk, user=approver, decision="approve", arguments={"to": "acme", "amount": 501}
        )
    assert "amount 501 exceeds the limit of 500 (proposed: 20)" in exc.value.message


def test_edit_with_invalid_arguments_gives_field_errors(operator, approver, no_enqueue):
    _run, approval = gated("test-payer", BIG, by=operator)
    with pytest.raises(DecisionInvalid) as exc:
        decisions.decide(
            approval.pk,
            user=approver,
            decision="approve",
            arguments={"to": "acme", "amount": "lots", "approved": True},
        )
    assert "amount" in exc.value.errors and "approved" in exc.value.errors


def test_engine_refuses_arguments_that_differ_from_the_approved_ones(
    operator, approver, no_enqueue
):
    run, approval = gated("test-payer", BIG, by=operator)
    decisions.decide(approval.pk, user=approver, decision="approve")
    # Tampering after the decision (a direct DB write, past Postgres' refusal) must not run
    # anything.
    forged = canonical_json({"to": "acme", "amount": "9999"})
    tamper(
        "UPDATE approvals_approval SET edited_args = %s WHERE id = %s", [forged, approval.pk.hex]
    )
    drive(run)
    assert EXECUTED == []
    assert "do not match" in run.steps.get(kind=Step.Kind.TOOL).data["error"]


def test_four_eyes_launcher_cannot_approve_high_blast_but_another_approver_can(
    django_user_model, approver, no_enqueue
):
    launcher = make_user(django_user_model, "lena", "operator", "approver")
    run, approval = gated("test-payer", BIG, by=launcher)
    assert approval.risk == "high"

    with pytest.raises(DecisionForbidden) as exc:
        decisions.decide(approval.pk, user=launcher, decision="approve")
    assert "four-eyes" in exc.value.message
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING

    decisions.decide(approval.pk, user=approver, decision="approve")
    drive(run)
    assert len(EXECUTED) == 1


def test_four_eyes_lets_the_launcher_reject_and_approve_below_the_level(
    django_user_model, no_enqueue
):
    launcher = make_user(django_user_model, "lena", "operator", "approver")
    _run, approval = gated("test-payer", BIG, by=launcher)
    decisions.decide(approval.pk, user=launcher, decision="reject", reason="changed my mind")
    _run2, approval2 = gated("test-payer", BIG, by=launcher, four_eyes_from="critical")
    assert decisions.decide(approval2.pk, user=launcher, decision="approve").status == "approved"


def test_viewer_and_operator_cannot_decide(operator, viewer, no_enqueue):
    _run, approval = gated("test-payer", BIG, by=operator)
    for user in (viewer, operator):
        with pytest.raises(DecisionForbidden):
            decisions.decide(approval.pk, user=user, decision="approve")
    assert not ApprovalVote.objects.exists()


def test_only_named_approvers_may_decide(
    operator, approver, admin_user, django_user_model, no_enqueue
):
    named = make_user(django_user_model, "nora", "approver")
    run, approval = gated("test-payer", BIG, by=operator, approvers=["nora"])
    for user in (approver, admin_user):
        with pytest.raises(DecisionForbidden) as exc:
            decisions.decide(approval.pk, user=user, decision="approve")
        assert "nora" in exc.value.message
    decisions.decide(approval.pk, user=named, decision="approve")
    drive(run)
    assert len(EXECUTED) == 1


def test_quorum_needs_distinct_approvers_before_anything_runs(
    operator, approver, django_user_model, no_enqueue
):
    second = make_user(django_user_model, "bea", "approver")
    run, approval = gated("test-payer", BIG, by=operator, quorum_from="high", quorum=2)

    first = decisions.decide(approval.pk, user=approver, decision="approve")
    assert first.status == Approval.Status.PENDING
    run.refresh_from_db()
    assert run.status == Run.Status.WAITING
    assert no_enqueue == [str(run.pk)]  # nothing resumed on a partial quorum
    with pytest.raises(DecisionConflict) as exc:
        decisions.decide(approval.pk, user=approver, decision="approve")
    assert "already voted approve" in exc.value.message

    done = decisions.decide(approval.pk, user=second, decision="approve")
    assert done.status == Approval.Status.APPROVED and done.decided_by == second
    assert [s["votes"] for s in decision_steps(run)] == ["1 of 2", "2 of 2"]
    assert no_enqueue == [str(run.pk)] * 2
    drive(run)
    assert len(EXECUTED) == 1


def test_quorum_any_rejection_rejects(operator, approver, django_user_model, no_enqueue):
    second = make_user(django_user_model, "bea", "approver")
    run, approval = gated("test-payer", BIG, by=operator, quorum_from="high", quorum=3)
    decisions.decide(approval.pk, user=approver, decision="approve")
    rejected = decisions.decide(approval.pk, user=second, decision="reject", reason="no")
    assert rejected.status == Approval.Status.REJECTED
    drive(run)
    assert EXECUTED == []


def test_quorum_gates_cannot_be_edited(operator, approver, django_user_model, no_enqueue):
    second = make_user(django_user_model, "bea", "approver")
    run, approval = gated("test-payer", BIG, by=operator, quorum_from="high", quorum=2)
    with pytest.raises(DecisionInvalid) as exc:
        decisions.decide(
            approval.pk, user=approver, decision="approve", arguments={"to": "acme", "amount": "1"}
        )
    assert "several approvers" in exc.value.message
    assert not ApprovalVote.objects.exists()
    # Re-sending the proposed arguments is not an edit.
    decisions.decide(approval.pk, user=approver, decision="approve", arguments=BIG)
    decisions.decide(approval.pk, user=second, decision="approve")
    drive(run)
    assert EXECUTED == [("test_transfer", BIG)]


def test_partial_decisions_of_parallel_calls_execute_nothing(operator, approver, no_enqueue):
    run, _approval = gated("test-payer-2", BIG, by=operator)
    pending = list(Approval.objects.filter(run=run).order_by("gate_seq"))
    assert len(pending) == 2

    decisions.decide(pending[0].pk, user=approver, decision="approve")
    run.refresh_from_db()
    assert run.status == Run.Status.WAITING
    assert no_enqueue == [str(run.pk)]
    assert drive(run) == "busy"  # not runnable while a decision is pending
    assert EXECUTED == []

    decisions.decide(pending[1].pk, user=approver, decision="reject", reason="one is enough")
    assert no_enqueue == [str(run.pk)] * 2
    drive(run)
    assert len(EXECUTED) == 1


def test_question_flow_the_agent_continues_with_the_answer(operator, approver, no_enqueue):
    run, approval = gated("test-asker", {"topic": "backups"}, by=operator)
    assert approval.kind == Approval.Kind.QUESTION
    assert approval.question == "Which region for backups?"
    assert approval.options == ["eu", "us"]

    with pytest.raises(DecisionInvalid):
        decisions.decide(approval.pk, user=approver, decision="approve")
    with pytest.raises(DecisionInvalid) as exc:
        decisions.decide(approval.pk, user=approver, decision="answer", answer="asia")
    assert "eu, us" in exc.value.message
    decisions.decide(approval.pk, user=approver, decision="answer", answer="eu")

    assert drive(run) == Run.Status.SUCCEEDED
    assert EXECUTED == [("test_use_region", {"region": "eu"})]
    answer_step = run.steps.filter(kind=Step.Kind.TOOL).first()
    assert answer_step.data["result"] == {"answer": "eu", "answered_by": "arthur"}
    assert decision_steps(run)[0]["answer"] == "eu"


def test_decision_on_a_cancelled_run_is_a_conflict(operator, approver, no_enqueue):
    run, approval = gated("test-payer", BIG, by=operator)
    run.cancel(by=operator)
    with pytest.raises(DecisionConflict) as exc:
        decisions.decide(approval.pk, user=approver, decision="approve")
    assert "cancelled" in exc.value.message
    approval.refresh_from_db()
    # Cancelled with its run, in the database (not only hidden), and nobody decided it.
    assert approval.status == Approval.Status.CANCELLED and approval.decided_by is None
    assert approval.decided_at is not None
    assert not approval.votes.exists()


def test_decision_made_before_the_run_paused_still_resumes_it(
    operator, approver, no_enqueue, monkeypatch
):
    """The gate and the pause are two transactions; a decision can land in between."""
    real_wait = lease.park_for_humans
    decided = []

    def decide_first(work):
        if not decided:
            approval = Approval.objects.get(run_id=work.run.pk)
            decided.append(decisions.decide(approval.pk, user=approver, decision="approve"))
        return real_wait(work)

    monkeypatch.setattr(lease, "park_for_humans", decide_first)
    run = launch("test-payer", BIG, by=operator)

    assert drive(run) == Run.Status.SUCCEEDED
    assert decided[0].status == Approval.Status.APPROVED
    assert len(EXECUTED) == 1


def test_time_open_is_measured_from_first_open(operator, approver, no_enqueue):
    run, approval = gated("test-payer", BIG, by=operator)
    view = decisions.record_open(approval, approver)
    earlier = timezone.now() - timedelta(seconds=42)
    type(view).objects.filter(pk=view.pk).update(first_opened_at=earlier)
    decisions.record_open(approval, approver)  # a second open keeps the first time
    decisions.decide(approval.pk, user=approver, decision="approve")
    vote = ApprovalVote.objects.get()
    assert vote.opened_at == earlier
    assert 42 <= vote.seconds_open < 60
    assert decision_steps(run)[0]["seconds_open"] >= 42


def test_expiry_with_reject_tells_the_agent(operator, no_enqueue):
    run, approval = gated("test-payer", BIG, by=operator)
    assert decisions.expire_due() == 0  # not due yet

    assert decisions.expire_due(now=approval.expires_at + timedelta(seconds=1)) == 1

    approval.refresh_from_db()
    assert approval.status == Approval.Status.EXPIRED
    step = decision_steps(run)[0]
    assert step["decision"] == "expire" and "the agent is told" in step["detail"]
    assert no_enqueue == [str(run.pk)] * 2
    assert drive(run) == Run.Status.SUCCEEDED
    assert EXECUTED == []
    assert "expired" in run.steps.get(kind=Step.Kind.TOOL).data["error"]
    assert "expired" in run.output


def test_expiry_with_fail_fails_the_run(operator, no_enqueue):
    run, approval = gated("test-payer", BIG, by=operator, on_expiry="fail")
    assert approval.on_expiry == "fail"
    decisions.expire_due(now=approval.expires_at + timedelta(seconds=1))
    assert drive(run) == Run.Status.FAILED
    assert run.termination_reason == Run.Termination.APPROVAL_EXPIRED
    assert EXECUTED == []


def test_expired_approval_cannot_be_decided(operator, approver, no_enqueue):
    _run, approval = gated("test-payer", BIG, by=operator)
    decisions.expire_due(now=approval.expires_at + timedelta(seconds=1))
    with pytest.raises(DecisionConflict) as exc:
        decisions.decide(approval.pk, user=approver, decision="approve")
    assert exc.value.message.startswith("already expired at")


@pytest.mark.parametrize("approval_id", ["not-a-uuid", "00000000-0000-0000-0000-000000000000"])
def test_unknown_approval_id_is_does_not_exist(approver, approval_id):
    with pytest.raises(Approval.DoesNotExist):
        decisions.decide(approval_id, user=approver, decision="approve")


def test_expiry_leaves_the_approval_of_a_cancelled_run_cancelled(operator, no_enqueue):
    run, approval = gated("test-payer", BIG, by=operator)
    run.cancel(by=operator)
    steps = run.steps.count()

    assert decisions.expire_due(now=approval.expires_at + timedelta(seconds=1)) == 0

    approval.refresh_from_db()
    run.refresh_from_db()
    assert approval.status == Approval.Status.CANCELLED
    assert run.status == Run.Status.CANCELLED and run.steps.count() == steps
    assert no_enqueue == [str(run.pk)]
