"""The goodwill round demo agent: one gated credit, a standing grant for the rest of the run,
a "continue?" checkpoint every second step (where a grant can be revoked before going on)."""

import pytest

from agentkit.agents import get_agent
from approvals import decisions
from approvals.grants import models as grants
from approvals.models import Approval
from runs import engine
from runs.models import Run, Step
from tests.conftest import make_user

pytestmark = pytest.mark.django_db

CUSTOMERS = "a@example.com, b@example.com, c@example.com"


@pytest.fixture
def round_run(operator, no_enqueue) -> Run:
    agent = get_agent("goodwill-round")
    data, errors = agent.validate_input({"customers": CUSTOMERS, "amount": "10", "reason": "other"})
    assert not errors
    run = engine.launch(agent=agent, input=data, launched_by=operator, provider="scripted")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    return run


def pending(run: Run) -> Approval:
    return Approval.objects.get(run=run, status=Approval.Status.PENDING)


def test_a_grant_covers_the_rest_and_the_checkpoint_lets_it_go_on(round_run, django_user_model):
    bea = make_user(django_user_model, "bea", "approver")
    first = pending(round_run)
    assert first.args["customer_email"] == "a@example.com"
    made, _ = grants.grant(first.pk, user=bea, bounds=grants.Bounds("run", []))
    assert engine.advance(round_run.pk, time_slice=30) == Run.Status.WAITING
    question = pending(round_run)
    assert question.kind == Approval.Kind.QUESTION  # "continue?" after two credits
    decisions.decide(question.pk, user=bea, decision="answer", answer="continue")
    assert engine.advance(round_run.pk, time_slice=30) == Run.Status.SUCCEEDED
    round_run.refresh_from_db()
    assert round_run.output == "Goodwill round over: 3 of 3 credits granted."
    assert Approval.objects.filter(grant=made).count() == 2


def test_revoked_at_the_checkpoint_the_last_credit_is_gated(round_run, django_user_model):
    bea = make_user(django_user_model, "bea", "approver")
    made, _ = grants.grant(pending(round_run).pk, user=bea, bounds=grants.Bounds("run", []))
    engine.advance(round_run.pk, time_slice=30)
    grants.revoke(made.pk, user=bea)
    decisions.decide(pending(round_run).pk, user=bea, decision="answer", answer="continue")
    assert engine.advance(round_run.pk, time_slice=30) == Run.Status.WAITING
    last = pending(round_run)
    assert last.args["customer_email"] == "c@example.com" and last.grant is None
    gates = round_run.steps.filter(kind=Step.Kind.GATE, data__tool="grant_goodwill_credit")
    assert gates.count() == 3


def test_a_bad_customer_list_is_a_form_error():
    agent = get_agent("goodwill-round")
    _, errors = agent.validate_input({"customers": "x, y", "amount": "10", "reason": "other"})
    assert "customers" in errors
    many = ", ".join(f"c{i}@example.com" for i in range(6))
    _, errors = agent.validate_input({"customers": many, "amount": "10", "reason": "other"})
    assert "customers" in errors
