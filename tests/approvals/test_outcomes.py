"""Runs say what happened: decision and tool-failure counters, their badges in the API, the
lists and the run page, who decided what on the audit list, its filters, and working time."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals import decisions
from approvals.models import Approval
from runs import live
from runs.models import Run
from runs.schemas import RunLiveOut

from .conftest import drive, gated

pytestmark = pytest.mark.django_db

BIG = {"to": "acme", "amount": "900.00"}


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def rejected_run(operator, approver) -> Run:
    run, approval = gated("test-payer", BIG, by=operator)
    decisions.decide(approval.pk, user=approver, decision="reject", reason="too much")
    assert drive(run) == Run.Status.SUCCEEDED  # the agent was told; the run "succeeds"
    return run


def test_a_rejection_is_counted_on_the_run_in_the_decisions_write(operator, approver, no_enqueue):
    run = rejected_run(operator, approver)
    assert (run.rejected_count, run.approved_count, run.tool_failed_count) == (1, 0, 0)
    assert run.outcome_badges == [("rejected", "1 rejected")]


def test_an_edited_approval_counts_as_edited_not_approved(operator, approver, no_enqueue):
    run, approval = gated("test-payer", BIG, by=operator)
    edited = {"to": "acme", "amount": "450.00"}
    decisions.decide(approval.pk, user=approver, decision="approve", arguments=edited)
    drive(run)
    assert (run.edited_count, run.approved_count) == (1, 0)
    assert [label for _, label in run.outcome_badges] == ["1 edited"]


def test_a_plain_approval_shows_no_badge(operator, approver, no_enqueue):
    run, approval = gated("test-payer", BIG, by=operator)
    decisions.decide(approval.pk, user=approver, decision="approve")
    drive(run)
    assert (run.approved_count, run.outcome_badges) == (1, [])


def test_an_expiry_is_counted(operator, no_enqueue):
    run, approval = gated("test-payer", BIG, by=operator)
    decisions.expire_due(now=approval.expires_at + timedelta(seconds=1))
    drive(run)
    assert run.expired_count == 1
    assert [label for _, label in run.outcome_badges] == ["1 expired"]


def test_an_answer_is_counted(operator, approver, no_enqueue):
    run, question = gated("test-asker", {"topic": "backups"}, by=operator)
    decisions.decide(question.pk, user=approver, decision="answer", answer="eu")
    drive(run)
    assert run.answered_count == 1


def test_a_failed_tool_call_is_counted_but_not_a_rejected_one(operator, no_enqueue):
    from agentkit.agents import get_agent
    from runs import engine

    agent = get_agent("refund-desk")
    data, _ = agent.validate_input({"order_id": 987654321, "reason": "damaged"})
    run = engine.launch(agent=agent, input=data, launched_by=operator, provider="scripted")
    drive(run)
    run.refresh_from_db()
    assert run.tool_failed_count == 1
    assert run.outcome_badges == [("tool-failed", "1 tool failed")]


def test_the_api_gives_the_outcome_and_summary_in_list_and_detail(operator, approver, no_enqueue):
    run = rejected_run(operator, approver)
    client = logged_in(operator)
    listed = next(r for r in client.get("/api/runs").json()["items"] if r["id"] == str(run.pk))
    detail = client.get(f"/api/runs/{run.pk}").json()
    for body in (listed, detail):
        assert body["outcome"]["rejected"] == 1
        assert body["outcome"]["badges"] == ["1 rejected"]
        assert body["input_summary"] == "to acme · amount 900.00"
        assert body["time"]["working_seconds"] >= 0


def test_the_api_list_costs_no_query_per_run(operator, approver, no_enqueue):
    rejected_run(operator, approver)
    client = logged_in(operator)
    with CaptureQueriesContext(connection) as one:
        client.get("/api/runs")
    for _ in range(3):
        rejected_run(operator, approver)
    with CaptureQueriesContext(connection) as four:
        client.get("/api/runs")
    assert len(four) == len(one)


def test_the_runs_list_dashboard_and_run_page_show_the_badge(operator, approver, no_enqueue):
    run = rejected_run(operator, approver)
    client = logged_in(operator)
    for url in ("/runs/", f"/runs/{run.pk}/"):
        html = client.get(url).content.decode()
        assert 'class="badge outcome-rejected">1 rejected<' in html, url
        assert "to acme · amount 900.00" in html, url
    Run.objects.filter(pk=run.pk).update(status=Run.Status.FAILED, termination_reason="rejected")
    html = client.get("/").content.decode()
    assert 'class="badge outcome-rejected">1 rejected<' in html


def test_the_audit_list_shows_who_decided_what(operator, approver, no_enqueue):
    run = rejected_run(operator, approver)
    other, approval = gated("test-payer", BIG, by=operator)
    decisions.decide(
        approval.pk, user=approver, decision="approve", arguments={**BIG, "amount": "400.00"}
    )
    html = logged_in(operator).get("/audit/").content.decode()
    assert "rejected by arthur" in html
    assert "edited by arthur" in html
    assert html.count('class="badge outcome-rejected"') == 1
    assert str(run.pk) in html and str(other.pk) in html


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("outcome=rejected", {"rejected"}),
        ("outcome=edited", {"edited"}),
        ("outcome=approved", {"approved"}),
        ("decided_by=arthur", {"rejected", "edited"}),
        ("decided_by=arthur&outcome=edited", {"edited"}),
        ("decided_by=nobody", set()),
    ],
)
def test_the_audit_list_filters_by_outcome_and_decider(
    operator, approver, admin_user, no_enqueue, query, expected
):
    runs = {"rejected": rejected_run(operator, approver)}
    runs["edited"], approval = gated("test-payer", BIG, by=operator)
    decisions.decide(
        approval.pk, user=approver, decision="approve", arguments={**BIG, "amount": "400.00"}
    )
    runs["approved"], approval = gated("test-payer", BIG, by=operator)
    decisions.decide(approval.pk, user=admin_user, decision="approve")
    html = logged_in(operator).get(f"/audit/?{query}").content.decode()
    shown = {name for name, run in runs.items() if f'data-run-id="{run.pk}"' in html}
    assert shown == expected


def test_time_waiting_for_a_person_is_not_working_time(operator, approver, no_enqueue):
    run, approval = gated("test-payer", BIG, by=operator)
    assert run.status == Run.Status.WAITING and run.waiting_since is not None
    # Ten minutes went by waiting (the run started then too).
    earlier = timezone.now() - timedelta(minutes=10)
    Run.objects.filter(pk=run.pk).update(started_at=earlier, waiting_since=earlier)
    run.refresh_from_db()
    assert run.working_seconds < 5
    decisions.decide(approval.pk, user=approver, decision="approve")
    run.refresh_from_db()
    assert run.waiting_since is None and run.seconds_waited >= 599
    drive(run)
    assert run.working_seconds < 5 and run.elapsed_seconds >= 600
    html = logged_in(operator).get(f"/runs/{run.pk}/").content.decode()
    assert "working time" in html and f"0s / {run.max_seconds}s" in html


def test_the_live_payload_carries_outcome_summary_and_waiting(operator, approver, no_enqueue):
    run = rejected_run(operator, approver)
    Run.objects.filter(pk=run.pk).update(seconds_waited=42.5)
    run.refresh_from_db()
    payload = RunLiveOut.from_orm(run).model_dump(mode="json")
    back = live.run_from(payload)
    assert back.outcome_badges == run.outcome_badges
    assert back.input_summary == run.input_summary
    assert back.seconds_waited == pytest.approx(42.5)
    assert back.waiting_since is None


def test_rejections_on_the_approval_row_agree_with_the_counter(operator, approver, no_enqueue):
    run = rejected_run(operator, approver)
    assert Approval.objects.filter(run=run, status="rejected").count() == run.rejected_count


def test_the_api_filters_runs_by_outcome(operator, approver, no_enqueue):
    rejected = rejected_run(operator, approver)
    approved, approval = gated("test-payer", BIG, by=operator)
    decisions.decide(approval.pk, user=approver, decision="approve")
    client = logged_in(operator)

    def ids(query: str) -> set[str]:
        response = client.get(f"/api/runs?{query}")
        assert response.status_code == 200, response.content
        return {r["id"] for r in response.json()["items"]}

    assert ids("outcome=rejected") == {str(rejected.pk)}
    assert ids("outcome=approved") == {str(approved.pk)}
    assert ids("outcome=expired") == set()
    assert ids("") == {str(rejected.pk), str(approved.pk)}
    assert client.get("/api/runs?outcome=bogus").status_code == 422
