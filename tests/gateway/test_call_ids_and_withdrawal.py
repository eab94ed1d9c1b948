"""A call submitted again with the agent's own id is the same call (a restarted agent waits on
the approval it opened), and a call the agent's framework abandoned is withdrawn: it never
runs, and nobody is left to decide it."""

import pytest

from approvals import decisions
from approvals.models import Approval
from gateway.models import ExternalCall
from runs.models import Run, args_hash

from .conftest import INVOICE_LIMIT_ARGS, AgentClient, make_agent


def test_the_same_call_id_is_the_same_call_across_sessions(bot):
    first = bot.call(bot.session(), "pay_invoice", INVOICE_LIMIT_ARGS, call_id="interrupt-7")
    assert first.status_code == 202
    # The agent restarted: a new session, the same interrupt.
    again = bot.call(bot.session(), "pay_invoice", INVOICE_LIMIT_ARGS, call_id="interrupt-7")
    assert again.status_code == 202
    assert again.json()["call"] == first.json()["call"]
    assert again.json()["approval"] == first.json()["approval"]
    assert ExternalCall.objects.count() == 1 and Approval.objects.count() == 1


def test_a_call_id_reused_for_another_call_is_a_409(bot):
    session = bot.session()
    assert bot.call(session, "read_file", {"path": "a"}, call_id="tu_1").status_code == 200
    reused = bot.call(session, "read_file", {"path": "b"}, call_id="tu_1")
    assert reused.status_code == 409 and "already used" in reused.json()["detail"]


def test_call_ids_are_per_agent(bot, db):
    bot.call(bot.session(), "read_file", {"path": "a"}, call_id="tu_1")
    other = AgentClient(make_agent("other-bot")[1])
    assert (
        other.call(other.session(), "read_file", {"path": "zz"}, call_id="tu_1").status_code == 200
    )
    assert ExternalCall.objects.count() == 2


def test_a_withdrawn_pending_call_withdraws_its_approval(bot, approver):
    session = bot.session()
    body = bot.call(session, "pay_invoice", INVOICE_LIMIT_ARGS).json()
    withdrawn = bot.post(f"/calls/{body['call']}/withdraw", {"reason": "tool timed out after 2s"})
    assert withdrawn.status_code == 200
    assert (withdrawn.json()["status"], withdrawn.json()["approved"]) == ("withdrawn", False)
    approval = Approval.objects.get(pk=body["approval"])
    assert approval.status == "cancelled"
    assert approval.reason == "withdrawn by the agent: tool timed out after 2s"
    run = Run.objects.get(pk=session)
    assert run.status == "running"  # nothing left to wait for
    events = [s.data.get("event") for s in run.steps.order_by("seq")]
    assert events[-2:] == ["withdrawn", "resumed"]
    assert run.verify_chain() == (True, None)
    # Nobody can approve it any more, and it can never be reported as run.
    with pytest.raises(decisions.DecisionConflict):
        decisions.decide(
            approval.pk,
            user=approver,
            decision="approve",
            shown_args_hash=args_hash(approval.tool, approval.args),
        )
    assert bot.post(f"/calls/{body['call']}/result", {"result": "paid"}).status_code == 409
    assert bot.get(f"/calls/{body['call']}").json()["status"] == "withdrawn"
    # Idempotent.
    assert bot.post(f"/calls/{body['call']}/withdraw").status_code == 200


def test_an_approved_call_withdrawn_stays_approved_but_never_runs(bot, approver):
    session = bot.session()
    body = bot.call(session, "pay_invoice", INVOICE_LIMIT_ARGS).json()
    approval = Approval.objects.get(pk=body["approval"])
    decisions.decide(
        approval.pk,
        user=approver,
        decision="approve",
        shown_args_hash=args_hash(approval.tool, approval.args),
    )
    assert bot.post(f"/calls/{body['call']}/withdraw").status_code == 200
    assert Approval.objects.get(pk=approval.pk).status == "approved"
    step = Run.objects.get(pk=session).steps.order_by("-seq").first()
    assert (step.data["event"], step.data["approval_was"]) == ("withdrawn", "approved")
    assert bot.post(f"/calls/{body['call']}/result", {"result": "paid"}).status_code == 409


def test_a_call_that_ran_cannot_be_withdrawn(bot):
    session = bot.session()
    body = bot.call(session, "read_file", {"path": "a"}).json()
    assert bot.post(f"/calls/{body['call']}/result", {"result": "x"}).status_code == 200
    assert bot.post(f"/calls/{body['call']}/withdraw").status_code == 409
