"""The regression pages: roles and teams are checked, bad input is a form error, LLM text is
escaped."""

import pytest
from django.urls import reverse

from accounts.models import Team, TeamAgent
from evals import rehearsal
from evals.models import Case, Dataset, RegressionRun
from tests.evals.conftest import add
from tests.evals.test_regression import careful  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db


def test_an_operator_creates_a_dataset_and_bad_input_is_a_form_error(client, operator):
    client.force_login(operator)
    url = reverse("evals:datasets")
    response = client.post(url, {"name": "refunds", "agent": "refund-desk"})
    dataset = Dataset.objects.get()
    assert response.status_code == 302 and response.url == reverse(
        "evals:dataset", args=[dataset.pk]
    )
    assert dataset.created_by == operator
    response = client.post(url, {"name": "refunds", "agent": "no-such-agent"})
    assert response.status_code == 422
    assert "already exists" in response.content.decode()
    assert "Select a valid choice" in response.content.decode()
    assert Dataset.objects.count() == 1


def test_a_viewer_reads_but_cannot_build_or_run(client, viewer, dataset, approved):
    add(dataset, approved)
    client.force_login(viewer)
    page = client.get(reverse("evals:dataset", args=[dataset.pk]))
    assert page.status_code == 200 and "issue_refund" in page.content.decode()
    assert "run-regression" not in page.content.decode()
    for name, data in [
        ("evals:add_decisions", {"verdict": ""}),
        ("evals:run_regression", {"agent": "refund-desk", "provider": "scripted"}),
    ]:
        assert client.post(reverse(name, args=[dataset.pk]), data).status_code == 403
    assert (
        client.post(reverse("evals:datasets"), {"name": "x", "agent": "refund-desk"}).status_code
        == 403
    )
    assert dataset.cases.count() == 1 and not RegressionRun.objects.exists()


def test_another_team_s_dataset_and_regression_runs_are_out_of_reach(
    client, operator, dataset, approved
):
    add(dataset, approved)
    client.force_login(operator)
    run = client.post(
        reverse("evals:run_regression", args=[dataset.pk]),
        {"agent": "refund-desk", "provider": "scripted"},
    )  # started, not run: the task is sent once the request's transaction commits
    regression = RegressionRun.objects.get()
    assert run.url == reverse("evals:regression_run", args=[regression.pk])
    # The refund desk now belongs to a team the operator is not in.
    TeamAgent.objects.create(
        team=Team.objects.create(name="Bravo", slug="bravo"), agent="refund-desk"
    )
    client.force_login(operator.__class__.objects.get(pk=operator.pk))
    assert client.get(reverse("evals:dataset", args=[dataset.pk])).status_code == 404
    assert client.get(reverse("evals:regression_run", args=[regression.pk])).status_code == 403
    assert "refunds" not in client.get(reverse("evals:datasets")).content.decode()
    response = client.post(
        reverse("evals:add_approval", args=[approved.pk]), {"dataset": dataset.pk}
    )
    assert response.status_code == 404


def test_bulk_add_takes_the_decisions_the_filter_selects(
    client, operator, dataset, approved, edited, rejected
):
    client.force_login(operator)
    url = reverse("evals:add_decisions", args=[dataset.pk])
    response = client.post(url, {"verdict": "edited", "tool": "issue_refund"})
    assert (
        response.status_code == 200
        and "1 case(s) added from 1 decision(s)" in response.content.decode()
    )
    assert list(dataset.cases.values_list("verdict", flat=True)) == [Case.Verdict.EDITED]
    response = client.post(url, {"verdict": ""})
    assert "2 case(s) added from 3 decision(s)" in response.content.decode()
    assert "already in refunds" in response.content.decode()
    bad = client.post(url, {"since": "2026-02-01", "until": "2026-01-01"})
    assert bad.status_code == 422 and "is after" in bad.content.decode()
    assert dataset.cases.count() == 3


def test_a_decided_approval_is_added_from_its_card(client, operator, dataset, edited):
    client.force_login(operator)
    card = client.get(reverse("approvals:detail", args=[edited.pk])).content.decode()
    assert 'id="add-to-dataset"' in card and ">refunds</option>" in card
    url = reverse("evals:add_approval", args=[edited.pk])
    assert client.post(url, {"dataset": "999"}).status_code == 422
    response = client.post(url, {"dataset": dataset.pk})
    assert response.status_code == 302
    assert dataset.cases.get().source_approval == edited
    assert client.post(url, {"dataset": dataset.pk}).status_code == 409


def test_a_started_run_is_followed_until_its_task_has_run(
    client, operator, dataset, approved, eager, django_capture_on_commit_callbacks
):
    add(dataset, approved)
    client.force_login(operator)
    url = reverse("evals:run_regression", args=[dataset.pk])
    with django_capture_on_commit_callbacks() as sent:
        response = client.post(url, {"agent": "refund-desk", "provider": "scripted"})
    regression = RegressionRun.objects.get()
    page = client.get(response.url).content.decode()
    assert 'data-finished="false"' in page and 'hx-trigger="every 2s"' in page
    assert "Running: replaying 1 case(s)" in page
    (send,) = sent
    send()  # the task, run inline
    regression.refresh_from_db()
    assert regression.finished_at and (regression.passed, regression.cases) == (1, 1)
    page = client.get(response.url).content.decode()
    assert 'data-finished="true"' in page and "every 2s" not in page


def test_a_case_that_cannot_be_replayed_is_an_error_and_a_lost_agent_fails_the_run(
    dataset, approved, monkeypatch
):
    add(dataset, approved)

    def broken(*args):
        raise RuntimeError("the model provider is misconfigured")

    monkeypatch.setattr(rehearsal, "rehearse", broken)
    regression = rehearsal.start(dataset, provider="scripted")
    (result,) = regression.results.all()
    assert result.outcome == "error" and "misconfigured" in result.detail
    assert (regression.passed, regression.cases, regression.error) == (0, 1, "")

    gone = rehearsal.prepare(dataset, provider="scripted")
    RegressionRun.objects.filter(pk=gone.pk).update(agent="retired-agent")
    gone.refresh_from_db()
    rehearsal.execute(gone)
    gone.refresh_from_db()
    assert gone.finished_at and "retired-agent" in gone.error
    assert not gone.results.exists()


def test_the_agent_replayed_must_be_the_user_s_to_launch(client, operator, dataset, approved):
    add(dataset, approved)
    bravo = Team.objects.create(name="Bravo", slug="bravo")
    TeamAgent.objects.create(team=bravo, agent="sql-analyst")
    client.force_login(operator)
    response = client.post(
        reverse("evals:run_regression", args=[dataset.pk]),
        {"agent": "sql-analyst", "provider": "scripted"},
    )
    assert response.status_code == 422  # not among the agents offered
    assert not RegressionRun.objects.exists()


def test_the_regression_page_shows_the_diff_and_escapes_the_model_s_text(
    client,
    operator,
    dataset,
    approved,
    edited,
    careful,  # noqa: F811
    eager,
    django_capture_on_commit_callbacks,
):
    add(dataset, approved, edited)
    client.force_login(operator)
    url = reverse("evals:run_regression", args=[dataset.pk])
    with django_capture_on_commit_callbacks(execute=True):
        client.post(url, {"agent": "refund-desk", "provider": "scripted"})
        client.post(url, {"agent": careful.slug, "provider": "scripted"})
    before, after = RegressionRun.objects.order_by("pk")
    page = client.get(reverse("evals:regression_run", args=[after.pk])).content.decode()
    assert "&lt;b&gt;100.00&lt;/b&gt;" in page and "<b>100.00</b>" not in page
    assert 'data-outcome="fail"' in page and 'data-outcome="pass"' in page
    assert after.fingerprint in page
    compare = client.get(reverse("evals:compare", args=[after.pk]), {"before": before.pk})
    text = compare.content.decode()
    assert 'data-change="fixed"' in text and 'data-change="broken"' in text
    assert client.get(reverse("evals:compare", args=[after.pk]), {"before": "x"}).status_code == 400
    bad = client.post(url, {"agent": "refund-desk", "provider": "openai"})
    assert bad.status_code == 422 and RegressionRun.objects.count() == 2


def test_a_run_s_decisions_are_added_from_its_page(client, operator, dataset, edited, rejected):
    client.force_login(operator)
    run_page = client.get(reverse("runs:detail", args=[edited.run_id])).content.decode()
    link = f"{reverse('evals:datasets')}?run={edited.run_id}"
    assert f'href="{link}"' in run_page
    page = client.get(link).content.decode()
    assert 'id="from-run"' in page and 'data-dataset="refunds"' in page
    response = client.post(
        reverse("evals:add_decisions", args=[dataset.pk]), {"run": str(edited.run_id)}
    )
    assert "1 case(s) added from 1 decision(s)" in response.content.decode()
    assert dataset.cases.get().source_approval == edited  # not the other run's rejection
    assert (
        "from-run" not in client.get(reverse("evals:datasets") + "?run=nonsense").content.decode()
    )
