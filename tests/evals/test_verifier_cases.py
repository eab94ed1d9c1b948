"""Verifier failures as regression cases: the revenue check's wrong figure (its verifier sent
it back) becomes a case whose expected outcome is an answer that passes the verifier; a version
that answers right passes it, the version that made the mistake fails it again."""

import dataclasses

import pytest
from django.urls import reverse

from agentkit.agents import CATALOGUE
from evals import cases, rehearsal
from evals.models import Case, CaseResult, Dataset
from runs import engine
from runs.models import Run, Step
from tests.demo.test_demo_flows import launch_default


@pytest.fixture
def checked(operator, no_enqueue) -> Run:
    """A revenue check whose first JSON answer (delivered orders only) its verifier failed."""
    run = launch_default("revenue-check", operator)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    return run


@pytest.fixture
def figures(operator) -> Dataset:
    return Dataset.objects.create(name="figures", agent="revenue-check", created_by=operator)


@pytest.fixture
def summing_all(monkeypatch):
    """A new version: from where it answered wrong (the delivered-only figure in hand), it
    sums every order first, then answers."""
    original = CATALOGUE["revenue-check"]

    def script(data):
        turns = original.script(data)
        return [*turns[:2], turns[3], turns[4]]

    agent = dataclasses.replace(original, slug="revenue-check-fixed", script=script)
    monkeypatch.setitem(CATALOGUE, agent.slug, agent)
    return agent


def failures_of(run: Run) -> list[Step]:
    return list(run.steps.filter(kind=Step.Kind.VERIFY, data__passed=False))


def test_a_failed_answer_becomes_a_case_with_the_context_before_it(checked, figures):
    (failed,) = failures_of(checked)
    added, skipped = cases.add_failures(figures, [failed])
    assert not skipped
    (case,) = added
    assert case.verdict == Case.Verdict.VERIFIER_FAILED
    assert case.tool == "revenue recomputed" and case.source_seq == failed.seq
    assert case.reason == failed.data["reason"]
    assert '"revenue"' in case.proposed_args["answer"]  # the answer the verifier failed
    # The conversation up to the model turn that gave it: that answer is not in it.
    assert case.proposed_args["answer"] not in repr(case.context)
    assert case.context[-1]["role"] == "user"
    # Once per dataset; a passed check or another agent's dataset is refused with a reason.
    assert cases.add_failures(figures, [failed])[0] == []
    passed = checked.steps.filter(kind=Step.Kind.VERIFY, data__passed=True).first()
    _, why = cases.add_failures(figures, [passed])
    assert "only a final answer its verifier failed" in why[0]
    refunds = Dataset.objects.create(name="refunds", agent="refund-desk")
    _, why = cases.add_failures(refunds, [failed])
    assert "the dataset is refund-desk's" in why[0]


def test_the_version_that_made_the_mistake_fails_and_a_fixed_one_passes(
    checked, figures, summing_all
):
    cases.add_failures(figures, failures_of(checked))
    same = rehearsal.start(figures, provider="scripted")
    (result,) = same.results.all()
    assert result.outcome == CaseResult.Outcome.FAIL
    assert "fails revenue recomputed again" in result.detail
    fixed = rehearsal.start(figures, "revenue-check-fixed", provider="scripted")
    (result,) = fixed.results.all()
    assert result.outcome == CaseResult.Outcome.PASS, result.detail
    assert result.detail == "its answer now passes revenue recomputed"
    # Nothing the rehearsals did stayed.
    assert Run.objects.filter(trigger=Run.Trigger.REPLAY).count() == 0


def test_a_run_s_verifier_failures_are_added_from_its_page(client, operator, checked, figures):
    client.force_login(operator)
    link = f"{reverse('evals:datasets')}?run={checked.pk}"
    page = client.get(link).content.decode()
    assert 'class="run-failure"' in page and "revenue recomputed" in page
    assert 'data-dataset="figures"' in page
    response = client.post(reverse("evals:add_decisions", args=[figures.pk]), {"run": checked.pk})
    body = response.content.decode()
    assert "1 case(s) added from 0 decision(s) and 1 verifier failure(s)" in body
    assert "an answer that passes" in body
    # The bulk filter by verdict: decisions only leaves the failures out.
    figures.cases.all().delete()
    response = client.post(
        reverse("evals:add_decisions", args=[figures.pk]), {"verdict": "approved"}
    )
    assert "0 case(s) added" in response.content.decode()
    assert not figures.cases.exists()


def test_a_viewer_cannot_add_a_verifier_failure(client, viewer, checked, figures):
    client.force_login(viewer)
    response = client.post(reverse("evals:add_decisions", args=[figures.pk]), {"run": checked.pk})
    assert response.status_code == 403
    assert not figures.cases.exists()
