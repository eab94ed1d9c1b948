"""An external agent's gate may halt at its deadline (on_expiry="halt"), as an internal one's:
nobody decided, so its waiting call keeps waiting (pending, saying why) until an operator
resumes the session (the call expired: the agent is told it was not executed) or cancels it
(cancelled). The waiter hears each change pushed, not by its safety timer."""

import asyncio
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model

from approvals import decisions
from approvals.models import Approval
from gateway import waits
from gateway.models import ExternalAgent
from tests.conftest import make_user

from .conftest import GATES, AgentClient, make_agent
from .test_waits import ANSWER_WITHIN, INVOICE, _db

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_safety_reads(monkeypatch):
    monkeypatch.setattr(waits, "RECHECK_SECONDS", 3600.0)


def _halting_call() -> tuple[str, dict]:
    _, token = make_agent(gates={**GATES, "on_expiry": "halt"})
    bot = AgentClient(token)
    made = bot.call(bot.session(), "pay_invoice", INVOICE)
    assert made.status_code == 202
    return token, made.json()


def _expire(approval_id: str) -> None:
    approval = Approval.objects.get(pk=approval_id)
    assert approval.on_expiry == "halt"
    assert decisions.expire_due(now=approval.expires_at + timedelta(seconds=1)) == 1


def _operator():
    User = get_user_model()
    return User.objects.filter(username="olga").first() or make_user(User, "olga", "operator")


def _resume(approval_id: str) -> None:
    run_id = Approval.objects.get(pk=approval_id).run_id
    decisions.resume_halted(run_id, user=_operator())


def _cancel(approval_id: str) -> None:
    Approval.objects.get(pk=approval_id).run.cancel(by=_operator(), reason="not worth it")


async def _still_waiting(task: asyncio.Task) -> None:
    await asyncio.sleep(0.5)
    assert not task.done()


async def test_a_halted_call_waits_until_an_operator_resumes_the_session():
    token, call = await _db(_halting_call)()
    waiting = asyncio.ensure_future(waits.call_state(token, call["call"], 25))
    await asyncio.sleep(0.3)
    await _db(_expire)(call["approval"])
    await _still_waiting(waiting)  # woken by the expiry, read it halted: waits on
    status, body = await waits.call_state(token, call["call"], 0.1)
    assert (status, body["status"]) == (200, "pending")
    assert body["reason"].startswith("nobody decided pay_invoice by")
    assert "resume the run or cancel it" in body["reason"]
    await _db(_resume)(call["approval"])
    status, body = await asyncio.wait_for(waiting, ANSWER_WITHIN)
    assert (status, body["status"], body["approved"]) == (200, "expired", False)


async def test_a_halted_call_is_cancelled_with_its_session():
    token, call = await _db(_halting_call)()
    await _db(_expire)(call["approval"])
    waiting = asyncio.ensure_future(waits.call_state(token, call["call"], 25))
    await _still_waiting(waiting)
    await _db(_cancel)(call["approval"])
    status, body = await asyncio.wait_for(waiting, ANSWER_WITHIN)
    assert (status, body["status"]) == (200, "cancelled")
    assert "cancelled while halted" in body["reason"]


def test_an_external_agent_s_rules_may_halt_but_not_invent_an_outcome():
    agent, _ = make_agent(gates={**GATES, "on_expiry": "halt"})
    assert agent.gate_rules()["on_expiry"] == "halt"
    bad = ExternalAgent(slug="bad", title="bad", gates={**GATES, "on_expiry": "explode"})
    with pytest.raises(ValueError, match="on_expiry must be reject, fail or halt"):
        bad.gate_rules()
