"""Regression runs compare what an agent version proposes with what the approver wanted, and
leave nothing behind."""

import dataclasses

import pytest

from agentkit.agents import CATALOGUE
from agentkit.llm.scripted import text, tool_use
from demo.models import Refund
from evals import cases, rehearsal
from evals.comparison import compare
from evals.models import Case, CaseResult
from evals.versions import fingerprint, version_of
from runs.models import Run, SideEffect, Step
from tests.evals.conftest import add

pytestmark = pytest.mark.django_db


def outcomes(regression) -> dict[str, str]:
    return {r.case.verdict: r.outcome for r in regression.results.select_related("case")}


@pytest.fixture
def careful(monkeypatch):
    """A new version of the refund desk: it looks the customer up, then refunds 100.00 only."""

    def script(data):
        return [
            [text("Checking the order."), tool_use("lookup_order", order_id=data["order_id"])],
            [text("Who is it?"), tool_use("lookup_customer", customer_id=1)],
            [
                text("Refunding <b>100.00</b> only."),
                tool_use(
                    "issue_refund",
                    order_id=data["order_id"],
                    amount="100.00",
                    reason=data["reason"],
                ),
            ],
        ]

    agent = dataclasses.replace(
        CATALOGUE["refund-desk"],
        slug="refund-desk-careful",
        script=script,
        system_prompt="Refund at most 100.00 without asking.",
    )
    monkeypatch.setitem(CATALOGUE, agent.slug, agent)
    return agent


def test_a_case_keeps_the_context_before_the_proposing_turn(dataset, edited):
    (case,) = add(dataset, edited)
    assert case.verdict == Case.Verdict.EDITED
    assert case.expected_args["amount"] == "100.00"
    assert case.proposed_args["amount"] == edited.args["amount"]
    # The conversation up to the lookup's result: the refund was not proposed yet.
    assert case.context[-1]["role"] == "user"
    assert [b["type"] for b in case.context[-1]["content"]] == ["tool_result"]
    assert "issue_refund" not in repr(case.context)
    assert case.input == edited.run.input


def test_the_current_version_is_judged_against_each_verdict(dataset, approved, edited, rejected):
    add(dataset, approved, edited, rejected)
    regression = rehearsal.start(dataset, provider="scripted")
    assert outcomes(regression) == {"approved": "pass", "edited": "fail", "rejected": "fail"}
    assert (regression.passed, regression.cases) == (1, 3)
    failed = regression.results.get(case__verdict="edited")
    assert failed.proposed_tool == "issue_refund"
    assert failed.diff == [
        {"field": "amount", "expected": "100.00", "proposed": edited.args["amount"]}
    ]
    rejected_result = regression.results.get(case__verdict="rejected")
    assert "no damage on the photos" in rejected_result.detail
    assert regression.cost_usd > 0 and failed.cost_usd > 0
    assert regression.version["model"] == "claude-sonnet-4-6"


def test_a_new_version_is_run_against_the_same_cases(dataset, approved, edited, rejected, careful):
    add(dataset, approved, edited, rejected)
    before = rehearsal.start(dataset, provider="scripted")
    after = rehearsal.start(dataset, careful.slug, provider="scripted")
    assert outcomes(after) == {"approved": "fail", "edited": "pass", "rejected": "pass"}
    # The lookup on the way ran (read-only): the proposal is the refund after it.
    result = after.results.get(case__verdict="approved")
    assert result.proposed_args["amount"] == "100.00"
    assert "<b>100.00</b>" in result.said
    assert before.fingerprint != after.fingerprint
    assert before.version["system_prompt_hash"] != after.version["system_prompt_hash"]
    changes = {row.label.split()[1]: row.change for row in compare(before, after)}
    assert changes == {"approved": "broken", "edited": "fixed", "rejected": "fixed"}


def test_a_regression_run_leaves_no_run_no_effect_and_no_refund(dataset, approved, edited):
    add(dataset, approved, edited)
    counts = (Run.objects.count(), Step.objects.count(), SideEffect.objects.count())
    refunds = Refund.objects.count()
    rehearsal.start(dataset, provider="scripted")
    assert (Run.objects.count(), Step.objects.count(), SideEffect.objects.count()) == counts
    assert Refund.objects.count() == refunds


def test_an_agent_that_now_answers_without_the_call_fails_an_approved_case(
    dataset, approved, monkeypatch
):
    quiet = dataclasses.replace(
        CATALOGUE["refund-desk"], slug="refund-desk-quiet", script=lambda d: []
    )
    monkeypatch.setitem(CATALOGUE, quiet.slug, quiet)
    add(dataset, approved)
    regression = rehearsal.start(dataset, quiet.slug, provider="scripted")
    (result,) = regression.results.all()
    assert result.outcome == CaseResult.Outcome.FAIL
    assert result.proposed_tool == "" and "proposes no call" in result.detail


def test_a_case_whose_input_the_agent_refuses_is_an_error(dataset, approved):
    (case,) = add(dataset, approved)
    Case.objects.filter(pk=case.pk).update(input={"order_id": "not a number"})
    regression = rehearsal.start(dataset, provider="scripted")
    (result,) = regression.results.all()
    assert result.outcome == CaseResult.Outcome.ERROR and "not valid" in result.detail
    assert regression.passed == 0


def test_unknown_agent_provider_or_empty_dataset_is_refused(dataset, approved):
    with pytest.raises(rehearsal.RegressionError, match="no cases"):
        rehearsal.start(dataset, provider="scripted")
    add(dataset, approved)
    with pytest.raises(rehearsal.RegressionError, match="no agent 'nope'"):
        rehearsal.start(dataset, "nope", provider="scripted")
    with pytest.raises(rehearsal.RegressionError, match="unknown provider"):
        rehearsal.start(dataset, provider="openai")


def test_a_decision_is_added_once_and_another_agent_s_is_refused(dataset, approved):
    add(dataset, approved)
    added, skipped = cases.add(dataset, [approved])
    assert added == [] and "already in refunds" in skipped[0]
    other = dataset.__class__.objects.create(name="sql", agent="sql-analyst")
    added, skipped = cases.add(other, [approved])
    assert added == [] and "the dataset is sql-analyst's" in skipped[0]


def test_the_version_fingerprint_is_stable_and_names_what_changed(careful):
    base = CATALOGUE["refund-desk"]
    assert fingerprint(version_of(base)) == fingerprint(version_of(base))
    renamed = dataclasses.replace(careful, slug="refund-desk")
    assert version_of(renamed)["tools_hash"] == version_of(base)["tools_hash"]
    assert fingerprint(version_of(renamed)) != fingerprint(version_of(base))
