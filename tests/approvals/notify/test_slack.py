"""The Slack app against a local fake of Slack's Web API and response URLs: requests posted
with buttons, signed button presses decided through the one decision path, the message
updated with who decided, refusals and lost races told to the presser only."""

import hashlib
import hmac
import json
import threading
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from agentkit.agents import get_agent
from agentkit.previews import Change
from agentkit.tools import REGISTRY
from agentops.celery import app as celery_app
from approvals import decisions, tasks
from approvals.models import Approval, SlackMessage, SlackUser
from approvals.notify.slack import app as slack
from runs import engine
from runs.models import Run, Step, args_hash
from tests.conftest import on_postgres

from ..conftest import gated

SECRET = "slack-signing-secret"
TEAM = "T1"


class FakeSlack:
    """Slack's Web API methods the app calls, and response URLs, on 127.0.0.1."""

    def __init__(self):
        self.calls: list[tuple[str, dict]] = []
        self.emails: dict[str, str] = {}
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _record(self, body: dict) -> None:
                path = urlsplit(self.path).path
                fake.calls.append((path, body))
                if path.startswith("/respond/"):
                    self._send(b"ok", "text/plain")
                    return
                answer: dict = {"ok": True}
                if path == "/api/chat.postMessage":
                    answer |= {"channel": body.get("channel"), "ts": "1700000000.000100"}
                elif path == "/api/users.info":
                    email = fake.emails.get(body.get("user", ""))
                    if email is None:
                        answer = {"ok": False, "error": "user_not_found"}
                    else:
                        answer |= {"user": {"id": body["user"], "profile": {"email": email}}}
                self._send(json.dumps(answer).encode(), "application/json")

            def _send(self, data: bytes, kind: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._record({k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()})

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                if "json" in (self.headers.get("Content-Type") or ""):
                    body = json.loads(raw or "{}")
                else:
                    body = {k: v[0] for k, v in parse_qs(raw).items()}
                self._record(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def called(self, path: str) -> list[dict]:
        return [body for p, body in self.calls if p == path]

    def replies(self) -> list[str]:
        return [body["text"] for p, body in self.calls if p.startswith("/respond/")]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake(settings):
    fake = FakeSlack()
    settings.AGENTOPS = {
        **settings.AGENTOPS,
        "SLACK_BOT_TOKEN": "xoxb-test",
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_CHANNEL": "C123",
        "SLACK_API_URL": fake.url + "/api/",
        "SLACK_MAP_BY_EMAIL": False,
    }
    # Tasks run inline, so a decision's Slack update (after its commit) is seen here.
    before = celery_app.conf.CELERY_TASK_ALWAYS_EAGER
    celery_app.conf.CELERY_TASK_ALWAYS_EAGER = True
    yield fake
    celery_app.conf.CELERY_TASK_ALWAYS_EAGER = before
    fake.close()


def report(operator) -> tuple[Run, Approval]:
    """The SQL analyst e-mails a report off its allow-list: a medium-risk gated call."""
    agent = get_agent("sql-analyst")
    data, errors = agent.validate_input({"question": "Revenue?", "report_to": "boss@example.com"})
    assert not errors
    run = engine.launch(agent=agent, input=data, launched_by=operator, provider="scripted")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    run.refresh_from_db()
    return run, Approval.objects.get(run=run)


def signed_post(payload: dict, *, timestamp: str | None = None, secret: str = SECRET):
    body = urlencode({"payload": json.dumps(payload)})
    timestamp = str(int(time.time())) if timestamp is None else timestamp
    mac = hmac.new(secret.encode(), f"v0:{timestamp}:{body}".encode(), hashlib.sha256)
    headers = {"X-Slack-Request-Timestamp": timestamp, "X-Slack-Signature": "v0=" + mac.hexdigest()}
    return Client().post(
        "/slack/actions", body, content_type="application/x-www-form-urlencoded", headers=headers
    )


def press(
    fake, approval, action: str, *, slack_user="U1", sign=True, age=0, secret=SECRET, value=None
):
    payload = {
        "type": "block_actions",
        "team": {"id": TEAM},
        "user": {"id": slack_user},
        "response_url": f"{fake.url}/respond/{slack_user}",
        "actions": [
            {
                "action_id": action,
                "value": f"{approval.pk}:{value or args_hash(approval.tool, approval.args)}",
            }
        ],
    }
    body = urlencode({"payload": json.dumps(payload)})
    timestamp = str(int(time.time()) - age)
    headers = {}
    if sign:
        mac = hmac.new(secret.encode(), f"v0:{timestamp}:{body}".encode(), hashlib.sha256)
        headers = {
            "X-Slack-Request-Timestamp": timestamp,
            "X-Slack-Signature": "v0=" + mac.hexdigest(),
        }
    return Client().post(
        "/slack/actions", body, content_type="application/x-www-form-urlencoded", headers=headers
    )


def link(user, slack_id="U1"):
    return SlackUser.objects.create(team_id=TEAM, slack_id=slack_id, user=user)


def assert_pending(run: Run, approval: Approval, seq: int) -> None:
    approval.refresh_from_db()
    run.refresh_from_db()
    assert approval.status == Approval.Status.PENDING
    assert run.last_seq == seq


@pytest.mark.django_db
def test_a_request_is_posted_once_with_its_buttons(fake, operator, no_enqueue):
    _, approval = report(operator)
    assert slack.post_request(str(approval.pk)) == "1700000000.000100"
    assert slack.post_request(str(approval.pk)) == "1700000000.000100"  # a retry: no repost
    (posted,) = fake.called("/api/chat.postMessage")
    assert posted["channel"] == "C123"
    buttons = {e["action_id"]: e for e in posted["blocks"][-1]["elements"]}
    assert set(buttons) == {"approve", "reject", "open"}
    shown = f"{args_hash(approval.tool, approval.args)}:{approval.preview['hash']}"
    assert buttons["approve"]["value"] == f"{approval.pk}:{shown}"  # the call and its preview
    assert "*What it would change:*" in posted["blocks"][0]["text"]["text"]
    assert "confirm" in buttons["approve"]  # irreversible: Slack asks "are you sure" first
    assert buttons["open"]["url"].endswith(f"/approvals/{approval.pk}/")
    assert SlackMessage.objects.get(approval=approval).ts == "1700000000.000100"


@pytest.mark.django_db
def test_the_notification_task_posts_when_the_app_is_configured(
    fake, operator, no_enqueue, monkeypatch
):
    _, approval = report(operator)
    queued = []
    monkeypatch.setattr(tasks.post_approval_to_slack, "delay", lambda a: queued.append(a))
    monkeypatch.setattr(tasks.send_approval_email, "delay", lambda a: None)
    tasks.notify_approval_requested(str(approval.pk))
    assert queued == [str(approval.pk)]


@pytest.mark.django_db
def test_approve_from_slack_decides_and_updates_the_message(
    fake, operator, approver, no_enqueue, django_capture_on_commit_callbacks
):
    run, approval = report(operator)
    slack.post_request(str(approval.pk))
    link(approver)
    with django_capture_on_commit_callbacks(execute=True):
        assert press(fake, approval, "approve").status_code == 200
    approval.refresh_from_db()
    assert approval.status == Approval.Status.APPROVED and approval.decided_by == approver
    step = Step.objects.get(run=run, kind=Step.Kind.DECISION)
    assert step.data["by"] == "arthur"
    (update,) = fake.called("/api/chat.update")
    assert update["ts"] == "1700000000.000100"
    assert "*Approved* by arthur" in update["blocks"][-1]["text"]["text"]
    assert "actions" not in [b["type"] for b in update["blocks"]]  # no buttons left


@pytest.mark.django_db
def test_an_approve_after_the_preview_changed_decides_nothing_and_refreshes_the_message(
    fake, operator, approver, no_enqueue, monkeypatch
):
    run, approval = report(operator)
    slack.post_request(str(approval.pk))
    link(approver)
    seq = run.last_seq
    tool = REGISTRY["email_report"]
    moved = Change(subject="e-mail to boss@example.com", before=None, after={"to": "someone else"})
    monkeypatch.setitem(REGISTRY, "email_report", replace(tool, preview=lambda args: moved))

    value = f"{args_hash(approval.tool, approval.args)}:{approval.preview['hash']}"
    assert press(fake, approval, "approve", value=value).status_code == 200

    assert_pending(run, approval, seq)
    assert "changed since you looked" in fake.replies()[-1]
    (update,) = fake.called("/api/chat.update")
    assert "someone else" in update["blocks"][0]["text"]["text"]
    fresh = {e["action_id"]: e for e in update["blocks"][-1]["elements"]}["approve"]["value"]
    assert fresh.endswith(approval.preview["hash"]) and approval.preview["hash"] not in value


@pytest.mark.django_db
def test_reject_from_slack_tells_the_agent_a_reason(fake, operator, approver, no_enqueue):
    _, approval = report(operator)
    link(approver)
    press(fake, approval, "reject")
    approval.refresh_from_db()
    assert approval.status == Approval.Status.REJECTED
    assert approval.reason == "Rejected from Slack"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "kwargs",
    [{"sign": False}, {"secret": "another-secret"}, {"age": 600}],
    ids=["missing", "wrong-secret", "stale"],
)
def test_a_bad_missing_or_stale_signature_is_refused(fake, operator, approver, no_enqueue, kwargs):
    run, approval = report(operator)
    link(approver)
    seq = run.last_seq
    assert press(fake, approval, "approve", **kwargs).status_code == 401
    assert_pending(run, approval, seq)
    assert fake.calls == []


@pytest.mark.django_db
def test_a_tampered_body_is_refused(fake, operator, approver, no_enqueue):
    run, approval = report(operator)
    link(approver)
    timestamp = str(int(time.time()))
    body = urlencode({"payload": json.dumps({"type": "block_actions"})})
    mac = hmac.new(SECRET.encode(), f"v0:{timestamp}:{body}".encode(), hashlib.sha256)
    response = Client().post(
        "/slack/actions",
        body + "x",
        content_type="application/x-www-form-urlencoded",
        headers={
            "X-Slack-Request-Timestamp": timestamp,
            "X-Slack-Signature": "v0=" + mac.hexdigest(),
        },
    )
    assert response.status_code == 401
    assert_pending(run, approval, run.last_seq)


@pytest.mark.django_db
def test_an_unknown_slack_user_decides_nothing(fake, operator, approver, no_enqueue):
    run, approval = report(operator)
    seq = run.last_seq
    assert press(fake, approval, "approve", slack_user="U999").status_code == 200
    assert_pending(run, approval, seq)
    assert fake.replies() == [
        "Nothing was decided: your Slack account is not linked to an agentops user."
    ]


@pytest.mark.django_db
def test_slack_users_can_be_found_by_email_when_allowed(
    fake, settings, operator, approver, no_enqueue
):
    _, approval = report(operator)
    approver.email = "arthur@example.com"
    approver.save()
    fake.emails["U7"] = "Arthur@example.com"
    press(fake, approval, "reject", slack_user="U7")
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING  # off by default
    settings.AGENTOPS = {**settings.AGENTOPS, "SLACK_MAP_BY_EMAIL": True}
    press(fake, approval, "reject", slack_user="U7")
    approval.refresh_from_db()
    assert approval.decided_by == approver
    assert SlackUser.objects.get(slack_id="U7").user == approver


@pytest.mark.django_db
def test_a_linked_viewer_cannot_decide_from_slack(fake, operator, viewer, no_enqueue):
    run, approval = report(operator)
    link(viewer)
    seq = run.last_seq
    press(fake, approval, "approve")
    assert_pending(run, approval, seq)
    assert fake.replies() == ["Nothing was decided: only approvers and admins can decide approvals"]


@pytest.mark.django_db
def test_a_high_risk_call_is_approved_in_agentops_not_in_slack(
    fake, operator, approver, no_enqueue
):
    run, approval = gated("test-payer", {"to": "initech", "amount": "900.00"}, by=operator)
    link(approver)
    seq = run.last_seq
    press(fake, approval, "approve")
    assert_pending(run, approval, seq)
    assert "approved in agentops" in fake.replies()[0]


@pytest.mark.django_db
def test_a_browser_decision_first_gives_slack_the_conflict_message(
    fake, operator, approver, admin_user, no_enqueue, django_capture_on_commit_callbacks
):
    _, approval = report(operator)
    slack.post_request(str(approval.pk))
    link(approver)
    browser = Client()
    browser.force_login(admin_user)
    with django_capture_on_commit_callbacks(execute=True):
        browser.post(
            reverse("approvals:decide", args=[approval.pk]), {"decision": "reject", "reason": "no"}
        )
    # The message shows the browser's decision, without its buttons.
    (update,) = fake.called("/api/chat.update")
    assert "*Rejected* by ada" in update["blocks"][-1]["text"]["text"]
    press(fake, approval, "approve")
    (reply,) = fake.replies()
    assert reply.startswith("Already decided: already rejected by ada at ")


@pytest.mark.django_db
def test_a_slack_decision_first_gives_the_browser_its_409(
    fake, operator, approver, admin_user, no_enqueue
):
    _, approval = report(operator)
    link(approver)
    press(fake, approval, "reject")
    browser = Client()
    browser.force_login(admin_user)
    response = browser.post(
        reverse("approvals:decide", args=[approval.pk]), {"decision": "reject", "reason": "no"}
    )
    assert response.status_code == 409
    assert "already rejected by arthur at" in response.content.decode()


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_slack_and_browser_racing_exactly_one_wins(
    fake, operator, approver, admin_user, no_enqueue
):
    run, approval = report(operator)
    link(approver)
    browser = Client()
    browser.force_login(admin_user)
    start = threading.Barrier(2)
    outcome: dict[str, object] = {}

    def from_slack():
        try:
            start.wait()
            outcome["slack"] = press(fake, approval, "reject").status_code
        finally:
            connection.close()

    def from_browser():
        try:
            start.wait()
            outcome["browser"] = browser.post(
                reverse("approvals:decide", args=[approval.pk]),
                {"decision": "reject", "reason": "from the browser"},
            ).status_code
        finally:
            connection.close()

    threads = [threading.Thread(target=from_slack), threading.Thread(target=from_browser)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    approval.refresh_from_db()
    assert approval.status == Approval.Status.REJECTED
    assert Step.objects.filter(run=run, kind=Step.Kind.DECISION).count() == 1
    if approval.decided_by == approver:  # Slack won: the browser got the 409
        assert outcome["browser"] == 409
        assert fake.replies() == []
    else:  # the browser won: Slack's presser was told who did, as the UI says it
        assert approval.decided_by == admin_user and outcome["browser"] == 200
        (reply,) = fake.replies()
        assert reply.startswith("Already decided: already rejected by ada at ")


@pytest.mark.django_db
def test_the_endpoint_is_off_without_configuration(operator, approver, no_enqueue):
    response = Client().post(
        "/slack/actions", "payload=%7B%7D", content_type="application/x-www-form-urlencoded"
    )
    assert response.status_code == 404


@pytest.mark.django_db
def test_an_expired_request_says_so_in_slack(
    fake, operator, no_enqueue, django_capture_on_commit_callbacks
):
    _, approval = report(operator)
    slack.post_request(str(approval.pk))
    with django_capture_on_commit_callbacks(execute=True):
        decisions.expire_due(now=approval.expires_at)
    (update,) = fake.called("/api/chat.update")
    assert "*Expired* by the system" in update["blocks"][-1]["text"]["text"]


@pytest.mark.django_db
@pytest.mark.parametrize("timestamp", ["abc", "", "-5", "1e9", "99999999999999999999"])
def test_a_timestamp_that_is_not_unix_seconds_is_401(fake, operator, approver, timestamp):
    run, approval = report(operator)
    seq = run.last_seq
    response = Client().post(
        "/slack/actions",
        "payload=%7B%7D",
        content_type="application/x-www-form-urlencoded",
        headers={"X-Slack-Request-Timestamp": timestamp, "X-Slack-Signature": "v0=00"},
    )
    assert response.status_code == 401
    # Correctly signed with it, it is refused all the same.
    assert signed_post({"type": "block_actions"}, timestamp=timestamp).status_code == 401
    assert_pending(run, approval, seq)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "change,words",
    [
        ({"actions": ["x"]}, "actions must be a list of objects"),
        ({"actions": "approve"}, "actions must be a list of objects"),
        ({"team": "T1"}, "team must be an object"),
        ({"user": "U1"}, "user must be an object"),
        ({"user": {"id": 5}}, "user must be an object"),
        ({"actions": [{"action_id": ["approve"], "value": "x"}]}, "action_id must be a string"),
        ({"actions": [{"action_id": "approve", "value": 5}]}, "value must be a string"),
        ({"response_url": 5}, "response_url must be a string"),
        ({"type": ["block_actions"]}, "type must be a string"),
    ],
)
def test_a_signed_payload_of_the_wrong_shape_is_400(
    fake, operator, approver, no_enqueue, change, words
):
    run, approval = report(operator)
    link(approver)
    seq = run.last_seq
    payload = {
        "type": "block_actions",
        "team": {"id": TEAM},
        "user": {"id": "U1"},
        "response_url": f"{fake.url}/respond/U1",
        "actions": [
            {
                "action_id": "approve",
                "value": f"{approval.pk}:{args_hash(approval.tool, approval.args)}",
            }
        ],
        **change,
    }
    response = signed_post(payload)
    assert response.status_code == 400
    assert words in response.content.decode()
    assert_pending(run, approval, seq)


@pytest.mark.django_db
def test_a_stale_card_is_told_nothing_was_decided(fake, operator, approver, no_enqueue):
    run, approval = report(operator)
    link(approver)
    seq = run.last_seq
    payload = {
        "type": "block_actions",
        "team": {"id": TEAM},
        "user": {"id": "U1"},
        "response_url": f"{fake.url}/respond/U1",
        # The hash of a call other than the one waiting (an edited or stale card).
        "actions": [{"action_id": "approve", "value": f"{approval.pk}:{'0' * 64}"}],
    }
    assert signed_post(payload).status_code == 200
    (reply,) = fake.replies()
    assert reply.startswith("Nothing was decided: the call you were shown is not the call")
    assert "Already decided" not in reply
    assert_pending(run, approval, seq)


@pytest.mark.django_db
def test_a_reminder_is_a_reply_in_the_request_s_thread_shown_in_the_channel(
    fake, operator, approver, no_enqueue, monkeypatch
):
    _, approval = report(operator)
    key = "expiry:0.1"
    assert slack.post_reminder(str(approval.pk), key) == ""  # never posted: nothing to remind
    ts = slack.post_request(str(approval.pk))
    # The sweep's reminder reaches Slack's queue beside the e-mail and the webhooks.
    queued = []
    monkeypatch.setattr(tasks.post_reminder_to_slack, "delay", lambda *a: queued.append(a))
    monkeypatch.setattr(tasks.send_reminder_email, "delay", lambda *a: None)
    tasks.approval_reminded(str(approval.pk), key)
    assert queued == [(str(approval.pk), key)]
    tasks.post_reminder_to_slack(str(approval.pk), key)
    request, reminder = fake.called("/api/chat.postMessage")
    assert reminder["thread_ts"] == ts and reminder["channel"] == request["channel"]
    assert reminder["reply_broadcast"] is True
    assert reminder["text"].startswith("Reminder: Nobody has decided this yet; it expires at")
    decisions.decide(approval.pk, user=approver, decision="reject", reason="no")
    assert slack.post_reminder(str(approval.pk), key) == ""  # decided: no reminder
    assert len(fake.called("/api/chat.postMessage")) == 2
