import pytest

from agentkit.agents import get_agent
from approvals.models import Approval
from demo.models import OutboxEmail
from runs import engine
from runs.models import Run, Step


@pytest.mark.django_db(transaction=True)
def test_sql_analyst_runs_until_its_email_is_gated(plain_user, no_enqueue):
    agent = get_agent("sql-analyst")
    data, errors = agent.validate_input({"question": "Revenue?", "report_to": "boss@example.com"})
    assert not errors
    run = engine.launch(agent=agent, input=data, launched_by=plain_user, provider="scripted")
    assert no_enqueue == [str(run.pk)]
    result = engine.advance(run.pk, time_slice=30)
    run.refresh_from_db()
    assert result == "waiting", [s.data for s in run.steps.all()]
    assert run.status == Run.Status.WAITING
    approval = Approval.objects.get(run=run)
    assert approval.tool == "email_report"
    assert "irreversible" in approval.explanation
    assert "allow-list" in approval.explanation
    assert OutboxEmail.objects.count() == 0
    kinds = list(run.steps.values_list("kind", flat=True))
    assert kinds[0] == Step.Kind.STATUS and Step.Kind.GATE in kinds
    assert run.verify_chain() == (True, None)
    seqs = list(run.steps.values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
