"""Rubber-stamp guard: per-approver and per-tool figures, fast decisions, sampled approvals."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from approvals import decisions
from approvals.learning import stats
from approvals.models import Approval, ApprovalView
from runs.models import Run
from tests.conftest import make_user

from ..conftest import gated

pytestmark = pytest.mark.django_db(transaction=True)

BIG = {"to": "acme", "amount": "800.00"}


def _opened(approval, user, seconds_ago: float) -> None:
    view = decisions.record_open(approval, user)
    ApprovalView.objects.filter(pk=view.pk).update(
        first_opened_at=view.first_opened_at - timedelta(seconds=seconds_ago)
    )


def test_figures_per_approver_and_per_tool(operator, approver, django_user_model, no_enqueue):
    careful = make_user(django_user_model, "carol", "approver")
    # arthur: one approval after 2 s (fast), one approval without opening (fast),
    # one rejection after 60 s; carol: one edit after 30 s, one question answered after 10 s.
    _, a1 = gated("test-payer", BIG, by=operator)
    _opened(a1, approver, 2)
    decisions.decide(a1.pk, user=approver, decision="approve")
    _, a2 = gated("test-payer", BIG, by=operator)
    decisions.decide(a2.pk, user=approver, decision="approve")
    _, a3 = gated("test-payer", BIG, by=operator)
    _opened(a3, approver, 60)
    decisions.decide(a3.pk, user=approver, decision="reject", reason="duplicate")
    _, a4 = gated("test-payer", BIG, by=operator)
    _opened(a4, careful, 30)
    decisions.decide(
        a4.pk, user=careful, decision="approve", arguments={"to": "acme", "amount": "100"}
    )
    _, q = gated("test-asker", {"topic": "x"}, by=operator)
    _opened(q, careful, 10)
    decisions.decide(q.pk, user=careful, decision="answer", answer="eu")
    # One that carol opened and let expire.
    _, a5 = gated("test-payer", BIG, by=operator)
    _opened(a5, careful, 5)
    decisions.expire_due(now=a5.expires_at + timedelta(seconds=1))

    figures = stats.approver_stats(fast_seconds=5)

    by_user = {row["approver"]: row for row in figures["approvers"]}
    arthur, carol = by_user["arthur"], by_user["carol"]
    assert arthur["decisions"] == 3 and arthur["approved"] == 2 and arthur["rejected"] == 1
    assert arthur["approval_rate"] == pytest.approx(0.667, abs=0.001)
    assert arthur["median_seconds_to_decide"] == pytest.approx(31, abs=1)  # of 2 s and 60 s
    assert arthur["fast_decisions"] == 2 and arthur["decided_without_opening"] == 1
    assert arthur["edits"] == 0 and arthur["expiries"] == 0
    assert carol["decisions"] == 2 and carol["answered"] == 1 and carol["approval_rate"] == 1.0
    assert carol["edits"] == 1 and carol["fast_decisions"] == 0 and carol["expiries"] == 1
    assert carol["median_seconds_to_decide"] == pytest.approx(20, abs=1)

    by_tool = {row["tool"]: row for row in figures["tools"]}
    assert by_tool["test_transfer"]["decisions"] == 4
    assert by_tool["test_transfer"]["expiries"] == 1
    assert by_tool["test_transfer"]["edits"] == 1
    assert by_tool["ask_operator"]["answered"] == 1

    flagged = {(f["approval"], f["by"]) for f in figures["fast_decisions"]}
    assert flagged == {(str(a1.pk), "arthur"), (str(a2.pk), "arthur")}


def test_threshold_comes_from_settings(settings, operator, approver, no_enqueue):
    settings.AGENTOPS = {**settings.AGENTOPS, "FAST_DECISION_SECONDS": 120}
    _, a = gated("test-payer", BIG, by=operator)
    _opened(a, approver, 60)
    decisions.decide(a.pk, user=approver, decision="approve")
    figures = stats.approver_stats()
    assert figures["fast_decision_seconds"] == 120
    assert [f["approval"] for f in figures["fast_decisions"]] == [str(a.pk)]


def test_sampled_approvals_are_listed(operator, approver, no_enqueue):
    _, sampled = gated("test-payer", BIG, by=operator)
    _, ruled = gated("test-payer", BIG, by=operator)
    Approval.objects.filter(pk=sampled.pk).update(sampled=True)
    decisions.decide(sampled.pk, user=approver, decision="approve")
    listed = stats.approver_stats()["sampled"]
    assert [s["approval"] for s in listed] == [str(sampled.pk)]
    assert listed[0]["decided_by"] == "arthur" and listed[0]["status"] == "approved"
    assert str(ruled.pk) not in {s["approval"] for s in listed}


def test_stats_api_is_for_admins(operator, approver, admin_user, no_enqueue):
    _, a = gated("test-payer", BIG, by=operator)
    decisions.decide(a.pk, user=approver, decision="approve")
    client = Client()
    client.force_login(approver)
    assert client.get("/api/approvals/stats").status_code == 403
    client.force_login(admin_user)
    body = client.get("/api/approvals/stats", {"days": 7}).json()
    assert body["approvers"][0]["approver"] == "arthur"
    assert body["approvers"][0]["decided_without_opening"] == 1
    assert client.get("/api/approvals/stats", {"days": 0}).status_code == 422


def test_time_to_decision_chart_counts_decisions_by_time_taken(viewer, operator, no_enqueue):
    # Drawn on the dashboard (approvals/templatetags/approval_tags.py).
    from tests.runs.factories import make_run

    now = timezone.now()
    run = make_run(operator, status=Run.Status.SUCCEEDED)
    Approval.objects.create(
        run=run,
        gate_seq=1,
        llm_seq=1,
        tool="email_report",
        explanation="test",
        status=Approval.Status.APPROVED,
        requested_at=now - timedelta(minutes=10),
        decided_at=now - timedelta(minutes=7),  # 3 minutes to decide
        decided_by=viewer,
        expires_at=now + timedelta(hours=1),
    )
    chart = stats.time_to_decision_chart(now=now)
    counts = {b.label: b.value for b in chart.bars}
    assert counts == {"<1m": 0, "1-5m": 1, "5-15m": 0, "15-60m": 0, "1-4h": 0, ">4h": 0}
