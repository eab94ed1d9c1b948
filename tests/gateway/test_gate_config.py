"""An external agent's gate rules must mean what they say: a session under rules that name an
argument its tool does not take is refused (422), before anything is written."""

import pytest
from django.core.exceptions import ValidationError

from runs.models import Run

from .conftest import GATES, AgentClient, make_agent

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "gates,words",
    [
        ({"thresholds": {"pay_invoice": {"amout": 500}}}, "argument 'amout'"),
        ({"allow_lists": {"pay_invoice": {"payee": ["acme"]}}}, "argument 'payee'"),
        ({"thresholds": {"read_file": {"size": 5}}}, "its arguments: none"),
        ({"sample_rates": {"pay_invoice": 2}}, "between 0 and 1"),
    ],
)
def test_a_session_under_rules_that_name_nothing_is_422(gates, words):
    _, token = make_agent(gates={**GATES, **gates})
    response = AgentClient(token).post("/sessions")
    assert response.status_code == 422, response.content
    body = response.json()
    assert words in body["detail"]
    assert any(words in problem for problem in body["errors"]["gates"])
    assert Run.objects.count() == 0


def test_a_rule_may_name_a_tool_the_agent_calls_without_registering_it():
    # External agents may call unregistered tools (gated by default): always_gate on one is
    # meaningful, since hints could otherwise lower its risk.
    _, token = make_agent(gates={**GATES, "always_gate": ["delete_branch"]})
    assert AgentClient(token).post("/sessions").status_code == 201


def test_the_admin_form_refuses_them_once_the_agent_has_tools():
    agent, _ = make_agent()
    agent.gates = {"thresholds": {"pay_invoice": {"amout": 500}}}
    with pytest.raises(ValidationError, match="amout"):
        agent.clean()


def test_a_named_approver_without_an_account_is_422(django_user_model):
    django_user_model.objects.create_user(username="bea", password="pw-bea")
    _, token = make_agent(gates={**GATES, "approvers": ["bea", "nobody"]})
    response = AgentClient(token).post("/sessions")
    assert response.status_code == 422
    assert "names approver 'nobody', who has no active account" in response.json()["detail"]
    assert "'bea'" not in response.json()["detail"]


def test_the_admin_form_refuses_an_approver_without_an_account():
    agent, _ = make_agent()
    agent.gates = {**GATES, "approvers": ["ghost"]}
    with pytest.raises(ValidationError, match="ghost"):
        agent.clean()
