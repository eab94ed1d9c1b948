"""The approvals API: who may do what, the queue, the approver's context, decisions, replays."""

import uuid

import pytest
from django.conf import settings
from django.test import Client

from accounts.models import ApiToken
from approvals.models import Approval, ApprovalView
from runs.models import Run, Step
from tests.conftest import make_user

from .conftest import EXECUTED, drive, gated

pytestmark = pytest.mark.django_db(transaction=True)

BIG = {"to": "acme", "amount": "800.00"}
ROLES = ["anonymous", "viewer", "operator", "approver", "admin"]


def client_for(django_user_model, role: str) -> Client:
    """A client with a bearer token for a fresh user holding `role` (none for anonymous)."""
    if role == "anonymous":
        return Client()
    user = make_user(django_user_model, f"{role}-user", role)
    _, raw = ApiToken.issue(user, "tests")
    return Client(headers={"Authorization": f"Bearer {raw}"})


def url(approval=None, suffix: str = "") -> str:
    return "/api/approvals" + (f"/{approval.pk}" if approval else "") + suffix


def post_decision(client: Client, approval, **body):
    return client.post(url(approval, "/decision"), body, content_type="application/json")


# --- authorization matrix ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("role", "read", "decide", "stats"),
    [
        ("anonymous", 401, 401, 401),
        ("viewer", 200, 403, 403),
        ("operator", 200, 403, 403),
        ("approver", 200, 200, 403),
        ("admin", 200, 200, 200),
    ],
)
def test_authorization_matrix(role, read, decide, stats, operator, django_user_model, no_enqueue):
    _run, approval = gated("test-payer", BIG, by=operator)
    client = client_for(django_user_model, role)

    assert client.get(url()).status_code == read
    assert client.get(url(approval)).status_code == read
    assert client.get(url(suffix="/stats")).status_code == stats
    # The compliance export is for admins, like the statistics.
    export = {"since": "2026-01-01", "until": "2026-01-02"}
    assert client.get(url(suffix="/export"), export).status_code == stats
    response = post_decision(client, approval, decision="approve")
    assert response.status_code == decide, response.content
    approval.refresh_from_db()
    expected = Approval.Status.APPROVED if decide == 200 else Approval.Status.PENDING
    assert approval.status == expected
    if decide == 403:
        assert "approvers and admins" in response.json()["detail"]


def test_a_bad_token_is_401(operator, no_enqueue):
    _, approval = gated("test-payer", BIG, by=operator)
    client = Client(headers={"Authorization": "Bearer ao_not-a-real-token"})
    assert client.get(url(approval)).status_code == 401
    assert post_decision(client, approval, decision="approve").status_code == 401


def test_session_decisions_need_the_csrf_token(operator, approver, no_enqueue):
    _, approval = gated("test-payer", BIG, by=operator)
    client = Client(enforce_csrf_checks=True)
    client.force_login(approver)
    assert client.get(url(approval)).status_code == 200
    assert post_decision(client, approval, decision="approve").status_code == 403
    assert Approval.objects.get(pk=approval.pk).status == Approval.Status.PENDING
    client.get("/accounts/login/")  # sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    response = client.post(
        url(approval, "/decision"),
        {"decision": "approve"},
        content_type="application/json",
        headers={"X-CSRFToken": token},
    )
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "approved"


# --- decisions -----------------------------------------------------------------------------------
def test_replayed_approve_after_the_run_moved_on_is_409_and_changes_nothing(
    operator, django_user_model, no_enqueue
):
    run, approval = gated("test-payer", BIG, by=operator)
    client = client_for(django_user_model, "approver")
    captured = {"decision": "approve"}
    assert post_decision(client, approval, **captured).status_code == 200
    assert drive(run) == Run.Status.SUCCEEDED
    steps_before, enqueues_before = run.steps.count(), len(no_enqueue)

    replay = post_decision(client, approval, **captured)

    assert replay.status_code == 409
    body = replay.json()
    assert body["detail"].startswith("already approved by approver-user at ")
    assert body["decided_by"] == "approver-user" and body["approval_status"] == "approved"
    assert run.steps.count() == steps_before
    assert len(no_enqueue) == enqueues_before
    assert len(EXECUTED) == 1


def test_invalid_decisions_are_422_with_field_errors(operator, django_user_model, no_enqueue):
    _, approval = gated("test-payer", BIG, by=operator)
    client = client_for(django_user_model, "approver")

    unknown = post_decision(client, approval, decision="maybe")
    assert unknown.status_code == 422 and "decision" in unknown.json()["errors"]
    no_reason = post_decision(client, approval, decision="reject")
    assert no_reason.status_code == 422 and "reason" in no_reason.json()["errors"]
    bad_args = post_decision(client, approval, decision="approve", arguments={"amount": "x"})
    assert bad_args.status_code == 422
    assert {"to", "amount"} <= set(bad_args.json()["errors"])
    escalated = post_decision(
        client, approval, decision="approve", arguments={"to": "acme", "amount": "9000"}
    )
    assert escalated.status_code == 422
    assert escalated.json()["detail"].startswith("edit refused")
    not_json = client.post(url(approval, "/decision"), "nope", content_type="application/json")
    assert not_json.status_code in (400, 422)
    assert Approval.objects.get(pk=approval.pk).status == Approval.Status.PENDING


def test_edit_and_approve_over_the_api(operator, django_user_model, no_enqueue):
    run, approval = gated("test-payer", BIG, by=operator)
    client = client_for(django_user_model, "approver")
    response = post_decision(
        client, approval, decision="approve", arguments={"to": "globex", "amount": 120}
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["original_arguments"] == {"to": "acme", "amount": "800.00"}
    assert body["edited_arguments"] == {"to": "globex", "amount": "120"}
    drive(run)
    assert EXECUTED == [("test_transfer", {"to": "globex", "amount": "120"})]


def test_a_decision_answers_with_the_approval_as_decided_in_one_write(
    operator, django_user_model, no_enqueue, django_assert_max_num_queries
):
    run, approval = gated("test-payer", BIG, by=operator)
    client = client_for(django_user_model, "approver")
    client.get(url(approval))  # the token's last use is written here, not below
    enqueued = len(no_enqueue)
    # Auth (token, roles), BEGIN, the run's and the approval's locks, the vote, the approval's
    # compare-and-set, "anything else pending?", one write of the run with its decision and
    # resumed steps, COMMIT, the votes for the answer: 11 (SQLite writes the run and its two
    # steps as three statements in a savepoint: 15). It was 25 with a read-back. Plus two for
    # the teams: the caller's teams, and whether they see the approval at all (else 404).
    with django_assert_max_num_queries(13 if settings.IS_POSTGRES else 17):
        response = post_decision(client, approval, decision="approve")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "approved" and body["decided_by"] == "approver-user"
    assert body["can_decide"] is False and body["votes_needed"] == 1
    assert [v["by"] for v in body["votes"]] == ["approver-user"]

    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED and run.approved_count == 1
    assert run.waiting_since is None and run.seconds_waited > 0
    decided, resumed = run.steps.order_by("-seq")[:2][::-1]
    assert (decided.kind, decided.data["status"]) == (Step.Kind.DECISION, "approved")
    assert (resumed.kind, resumed.data["event"]) == (Step.Kind.STATUS, "resumed")
    assert run.verify_chain() == (True, None)
    assert no_enqueue[enqueued:] == [str(run.pk)]  # sent to a worker once, after commit


def test_four_eyes_over_the_api_is_403_with_the_reason(django_user_model, no_enqueue):
    launcher = make_user(django_user_model, "lena", "operator", "approver")
    _, approval = gated("test-payer", BIG, by=launcher)
    _, raw = ApiToken.issue(launcher, "t")
    client = Client(headers={"Authorization": f"Bearer {raw}"})
    response = post_decision(client, approval, decision="approve")
    assert response.status_code == 403
    assert "four-eyes" in response.json()["detail"]
    detail = client.get(url(approval)).json()
    assert detail["can_decide"] is False and "four-eyes" in detail["why_not"]


def test_unknown_approval_is_404(django_user_model, no_enqueue):
    client = client_for(django_user_model, "approver")
    missing = f"/api/approvals/{uuid.uuid4()}"
    assert client.get(missing).status_code == 404
    response = client.post(
        missing + "/decision", {"decision": "approve"}, content_type="application/json"
    )
    assert response.status_code == 404
    assert client.get("/api/approvals/not-a-uuid").status_code == 404


def test_answering_a_question_over_the_api(operator, django_user_model, no_enqueue):
    run, approval = gated("test-asker", {"topic": "logs"}, by=operator)
    client = client_for(django_user_model, "approver")
    detail = client.get(url(approval)).json()
    assert detail["kind"] == "question" and detail["options"] == ["eu", "us"]
    assert post_decision(client, approval, decision="answer", answer="mars").status_code == 422
    assert post_decision(client, approval, decision="answer", answer="us").status_code == 200
    assert drive(run) == Run.Status.SUCCEEDED
    assert EXECUTED == [("test_use_region", {"region": "us"})]


# --- the queue and the context -------------------------------------------------------------------
def test_queue_is_sorted_by_risk_then_deadline_and_filters(
    operator, approver, django_user_model, no_enqueue
):
    _, high = gated("test-payer", BIG, by=operator)
    _, critical = gated("test-wiper", {"to": "staging", "amount": "1"}, by=operator)
    _, low = gated("test-asker", {"topic": "x"}, by=operator)
    _, high_later = gated("test-payer", BIG, by=approver)
    Approval.objects.filter(pk=high_later.pk).update(expires_at=high.expires_at.replace(year=2099))
    client = client_for(django_user_model, "viewer")

    body = client.get(url(), {"status": "pending"}).json()
    assert body["count"] == 4
    assert [i["id"] for i in body["items"]] == [
        str(a.pk) for a in (critical, high, high_later, low)
    ]
    assert body["items"][0]["risk"] == "critical" and body["items"][0]["tool"] == "test_wipe"

    assert client.get(url(), {"risk": "high"}).json()["count"] == 2
    assert client.get(url(), {"agent": "test-asker"}).json()["items"][0]["id"] == str(low.pk)
    page = client.get(url(), {"limit": 2, "offset": 2}).json()
    assert page["count"] == 4 and [i["id"] for i in page["items"]] == [
        str(high_later.pk),
        str(low.pk),
    ]
    assert client.get(url(), {"status": "approved"}).json()["count"] == 0
    assert client.get(url(), {"risk": "extreme"}).status_code == 422
    assert client.get(url(), {"limit": 0}).status_code == 422


def test_assigned_to_me_leaves_out_what_i_may_not_decide(
    operator, approver, django_user_model, no_enqueue
):
    _, others = gated("test-payer", BIG, by=operator)
    _, mine_launched = gated("test-payer", BIG, by=approver)  # four-eyes: not for me
    _, named_only = gated("test-payer", BIG, by=operator, approvers=["nora"])
    _, raw = ApiToken.issue(approver, "t")
    client = Client(headers={"Authorization": f"Bearer {raw}"})

    body = client.get(url(), {"assigned_to_me": "true"}).json()
    assert [i["id"] for i in body["items"]] == [str(others.pk)]
    assert body["count"] == 1
    everything = client.get(url()).json()
    flags = {i["id"]: i["can_decide"] for i in everything["items"]}
    assert flags == {str(others.pk): True, str(mine_launched.pk): False, str(named_only.pk): False}


def test_detail_gives_the_approver_context_and_records_the_open(
    operator, approver, viewer, no_enqueue
):
    _run, approval = gated("test-payer", BIG, by=operator)
    _, raw = ApiToken.issue(approver, "t")
    client = Client(headers={"Authorization": f"Bearer {raw}"})

    body = client.get(url(approval)).json()

    assert body["tool"] == "test_transfer"
    assert body["arguments"] == {"to": "acme", "amount": "800.00"}
    assert "exceeds" in body["explanation"] and "500" in body["explanation"]
    assert body["risk"] == "high" and body["sampled"] is False
    assert body["expires_at"] and body["on_expiry"] == "reject"
    assert body["run_context"]["goal"].startswith("Do it:")
    assert body["run_context"]["input"] == {"to": "acme", "amount": "800.00"}
    assert body["run_context"]["launched_by"] == "olivia"
    assert float(body["run_context"]["cost_usd"]) > 0
    schema = body["tool_info"]["input_schema"]
    assert set(schema["properties"]) == {"to", "amount"}
    kinds = [s["kind"] for s in body["recent_steps"]]
    assert kinds[-2:] == [Step.Kind.GATE, Step.Kind.STATUS]
    assert body["recent_steps"][-3]["tool_calls"][0]["tool"] == "test_transfer"
    assert body["can_decide"] is True and body["votes_needed"] == 1
    # Reading writes nothing (GET is safe); POST .../open records the open.
    assert body["opened_at"] is None
    assert not ApprovalView.objects.filter(approval=approval).exists()
    opened = client.post(url(approval, "/open"))
    assert opened.status_code == 200 and opened.json()["opened_at"] is not None
    view = ApprovalView.objects.get(approval=approval, user=approver)

    client.post(url(approval, "/open"))  # opening again keeps the first time
    assert ApprovalView.objects.get(pk=view.pk).first_opened_at == view.first_opened_at
    assert client.get(url(approval)).json()["opened_at"] is not None
    viewer_client = Client()
    viewer_client.force_login(viewer)
    assert viewer_client.get(url(approval)).status_code == 200
    # A session POST needs the CSRF token; viewers do not decide, so nothing is recorded.
    viewer_csrf = Client(enforce_csrf_checks=True)
    viewer_csrf.force_login(viewer)
    assert viewer_csrf.post(url(approval, "/open")).status_code == 403
    assert viewer_client.post(url(approval, "/open")).status_code == 200
    assert not ApprovalView.objects.filter(user=viewer).exists()


def test_pending_approvals_of_cancelled_runs_leave_the_queue(
    operator, django_user_model, no_enqueue
):
    run, approval = gated("test-payer", BIG, by=operator)
    client = client_for(django_user_model, "approver")
    assert client.get(url()).json()["count"] == 1
    run.cancel(by=operator)
    assert client.get(url()).json()["count"] == 0
    response = post_decision(client, approval, decision="approve")
    assert response.status_code == 409 and "cancelled" in response.json()["detail"]
