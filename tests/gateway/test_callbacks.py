"""A call's callback URL gets the decision, signed with the agent's key (SHA-256 of its
token), once, after the decision is committed."""

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from agentops.celery import app as celery_app
from approvals import decisions
from approvals.models import Approval
from gateway.models import ExternalCall
from runs.models import args_hash

from .conftest import AgentClient, make_agent


@pytest.fixture
def eager():
    before = celery_app.conf.CELERY_TASK_ALWAYS_EAGER
    celery_app.conf.CELERY_TASK_ALWAYS_EAGER = True
    yield
    celery_app.conf.CELERY_TASK_ALWAYS_EAGER = before


@pytest.fixture
def receiver():
    got: list[tuple[dict, bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append((dict(self.headers), body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/decided", got
    server.shutdown()


def test_the_decision_is_posted_signed_with_the_agents_key(
    db, eager, receiver, approver, django_capture_on_commit_callbacks
):
    url, got = receiver
    _, token = make_agent()
    bot = AgentClient(token)
    session = bot.session()
    body = bot.call(session, "delete_branch", {"name": "dev"}, callback_url=url).json()
    approval = Approval.objects.get(pk=body["approval"])
    with django_capture_on_commit_callbacks(execute=True):
        decisions.decide(
            approval.pk,
            user=approver,
            decision="reject",
            reason="keep it",
            shown_args_hash=args_hash(approval.tool, approval.args),
        )
    assert len(got) == 1
    headers, raw = got[0]
    key = hashlib.sha256(token.encode()).hexdigest()
    # What the agent does with any Standard Webhooks library: its key is the token's hash.
    assert Webhook(key.encode()).verify(raw, headers) == json.loads(raw)
    assert {k.lower(): v for k, v in headers.items()}["webhook-id"] == f"callback_{approval.pk}"
    with pytest.raises(WebhookVerificationError):
        Webhook(b"another key").verify(raw, headers)
    sent = json.loads(raw)
    assert (sent["call"], sent["status"], sent["reason"]) == (body["call"], "rejected", "keep it")
    assert ExternalCall.objects.get(pk=body["call"]).callback_sent_at is not None


def test_an_allowed_call_or_a_call_without_a_url_sends_nothing(
    db, eager, receiver, approver, django_capture_on_commit_callbacks
):
    url, got = receiver
    _, token = make_agent()
    bot = AgentClient(token)
    session = bot.session()
    assert bot.call(session, "read_file", {"path": "a"}, callback_url=url).status_code == 200
    body = bot.call(session, "delete_branch", {"name": "dev"}).json()
    approval = Approval.objects.get(pk=body["approval"])
    with django_capture_on_commit_callbacks(execute=True):
        decisions.decide(
            approval.pk,
            user=approver,
            decision="approve",
            shown_args_hash=args_hash(approval.tool, approval.args),
        )
    assert got == []
    assert bot.call(session, "x", {}, callback_url="ftp://nope").status_code == 422
