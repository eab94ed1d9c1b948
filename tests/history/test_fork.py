"""Fork: a new run from any checkpoint of a past run; the origin stays as it was."""

import pytest

from approvals import decisions
from approvals.models import Approval
from history.fork import ForkError, fork
from runs import engine
from runs.models import Run, Step

pytestmark = pytest.mark.django_db


def timeline(run: Run) -> list[tuple]:
    return list(run.steps.order_by("seq").values_list("seq", "kind", "data", "hash"))


def seq_of(run: Run, kind: str, **data) -> int:
    steps = run.steps.filter(kind=kind, **{f"data__{k}": v for k, v in data.items()})
    return steps.order_by("seq").values_list("seq", flat=True).first()


def test_a_fork_goes_on_from_the_checkpoints_state_and_leaves_the_origin_alone(refunded, operator):
    before = timeline(refunded)
    after_lookup = seq_of(refunded, Step.Kind.TOOL, tool="lookup_order")
    child = fork(refunded, after_lookup, by=operator)

    assert (child.trigger, child.parent_id, child.forked_from.seq) == (
        Run.Trigger.FORK,
        refunded.pk,
        after_lookup,
    )
    assert child.source == f"checkpoint {refunded.pk}@{after_lookup}"
    # The fork's conversation is the origin's up to the checkpoint.
    assert engine.conversation(child) == engine.conversation(refunded, upto_seq=after_lookup)
    # It goes on with the next turn: the refund, gated again by the fork's own approval.
    assert engine.advance(child.pk, time_slice=30) == Run.Status.WAITING
    gate = Approval.objects.get(run=child)
    assert gate.tool == "issue_refund" and gate.status == Approval.Status.PENDING
    assert not child.steps.filter(kind=Step.Kind.TOOL, data__tool="lookup_order").exists()

    assert timeline(refunded) == before
    assert refunded.verify_chain() == (True, None)
    child.refresh_from_db()
    assert child.verify_chain() == (True, None)


def test_a_call_pending_at_the_checkpoint_is_gated_again_in_the_fork(refunded, operator, approver):
    proposed = seq_of(refunded, Step.Kind.GATE, tool="issue_refund")
    # The checkpoint written with the gate: the refund pending, under the origin's approval.
    child = fork(refunded, proposed, by=operator)
    state = child.checkpoints.get(seq=1).state
    assert [p["name"] for p in state["pending"]] == ["issue_refund"]
    assert state["pending"][0]["approval"] is None

    assert engine.advance(child.pk, time_slice=30) == Run.Status.WAITING
    approval = Approval.objects.get(run=child)
    assert approval.tool == "issue_refund"
    decisions.decide(approval.pk, user=approver, decision="reject", reason="not this time")
    assert engine.advance(child.pk, time_slice=30) in (Run.Status.SUCCEEDED, Run.Status.WAITING)
    refund = child.steps.get(kind=Step.Kind.TOOL, data__tool="issue_refund")
    assert refund.data["is_error"] and "not this time" in refund.data["error"]


def test_the_final_checkpoint_forks_only_with_an_instruction(refunded, operator):
    with pytest.raises(ForkError, match="add an instruction"):
        fork(refunded, refunded.last_seq, by=operator)
    child = fork(refunded, refunded.last_seq, instruction="Also thank them.", by=operator)
    messages = engine.conversation(child)
    assert messages[-2]["role"] == "assistant"
    assert messages[-1] == {
        "role": "user",
        "content": [{"type": "text", "text": "Instruction from the operator: Also thank them."}],
    }


def test_an_instruction_comes_after_the_results_of_pending_calls(refunded, operator, approver):
    proposed = seq_of(refunded, Step.Kind.GATE, tool="issue_refund")
    child = fork(refunded, proposed, instruction="Be brief.", by=operator)
    assert engine.advance(child.pk, time_slice=30) == Run.Status.WAITING
    approval = Approval.objects.get(run=child)
    decisions.decide(approval.pk, user=approver, decision="reject", reason="no")
    engine.advance(child.pk, time_slice=30)
    child.refresh_from_db()
    messages = engine.conversation(child)
    with_result = next(
        m
        for m in messages
        if m["role"] == "user"
        and isinstance(m["content"], list)
        and any(b.get("type") == "tool_result" for b in m["content"])
        and any(b.get("type") == "text" for b in m["content"])
    )
    kinds = [b["type"] for b in with_result["content"]]
    assert kinds == ["tool_result", "text"]


def test_no_checkpoint_there_is_a_clear_error(refunded, operator):
    with pytest.raises(ForkError, match="no checkpoint after step #999"):
        fork(refunded, 999, by=operator)


def test_a_fork_of_a_fork_counts_every_model_turn_before_it(refunded, operator):
    after_lookup = seq_of(refunded, Step.Kind.TOOL, tool="lookup_order")
    child = fork(refunded, after_lookup, by=operator)
    assert child.step_count == 1
    assert engine.advance(child.pk, time_slice=30) == Run.Status.WAITING  # the refund turn
    gate = seq_of(child, Step.Kind.GATE, tool="issue_refund")
    grandchild = fork(child, gate, by=operator)
    # The lookup turn (inherited by the child) and the refund turn: the scripted model goes
    # on with the e-mail, not the refund again.
    assert grandchild.step_count == 2
