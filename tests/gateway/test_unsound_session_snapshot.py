"""A session whose snapshot has gate rules the policy cannot apply takes no call: registration
refuses such rules (test_gate_config.py), and a session written otherwise (an older version, a
hand-made row) is ended at its next call, as the engine ends such a run at its claim."""

import pytest

from gateway.models import ExternalCall
from runs.models import Run

from .conftest import INVOICE_LIMIT_ARGS, AgentClient, make_agent

pytestmark = pytest.mark.django_db


def test_a_call_in_a_session_under_rules_that_name_nothing_is_refused_and_ends_it():
    _, token = make_agent()
    bot = AgentClient(token)
    session = bot.session()
    run = Run.objects.get(pk=session)
    config = run.agent_config
    # Meant: pay_invoice's amount over 500 is gated. Spelt so, it gates nothing.
    config["gates"]["thresholds"] = {"pay_invoice": {"amout": 500}}
    Run.objects.filter(pk=run.pk).update(agent_config=config)

    response = bot.call(session, "pay_invoice", INVOICE_LIMIT_ARGS)
    assert response.status_code == 409, response.content
    assert "gate rules cannot be applied" in response.json()["detail"]
    assert "argument 'amout'" in response.json()["detail"]
    assert not ExternalCall.objects.filter(run=run).exists()
    run.refresh_from_db()
    assert (run.status, run.termination_reason) == (Run.Status.FAILED, Run.Termination.BLOCKED)
    assert "argument 'amout'" in run.status_detail


def test_a_sound_session_takes_the_same_call():
    _, token = make_agent()
    bot = AgentClient(token)
    session = bot.session()
    response = bot.call(session, "pay_invoice", INVOICE_LIMIT_ARGS)
    assert (response.status_code, response.json()["status"]) == (202, "pending")
