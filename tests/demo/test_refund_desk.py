"""The refund-desk demo agent with order ids that do not exist or cannot exist."""

import pytest
from django.test import Client

from agentkit.agents import get_agent
from runs import engine
from runs.models import Run, Step

pytestmark = pytest.mark.django_db


def test_an_order_id_beyond_64_bits_is_a_form_error(operator):
    client = Client()
    client.force_login(operator)
    data = {"agent": "refund-desk", "order_id": str(2**63), "reason": "damaged"}
    response = client.post("/runs/new/", data)
    assert response.status_code == 422
    assert "less than or equal to" in response.content.decode()
    assert Run.objects.count() == 0


def test_a_missing_order_ends_the_run_with_an_answer_not_a_crash_loop(operator, no_enqueue):
    agent = get_agent("refund-desk")
    data, errors = agent.validate_input({"order_id": 987654321, "reason": "damaged"})
    assert not errors
    run = engine.launch(agent=agent, input=data, launched_by=operator, provider="scripted")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    run.refresh_from_db()
    assert "could not look up order 987654321" in run.output
    assert run.error_count == 1  # the tool's "no order" error, nothing else
    assert not run.steps.filter(kind=Step.Kind.STATUS, data__event="error").exists()
    assert not run.steps.filter(kind=Step.Kind.TOOL, data__tool="issue_refund").exists()
