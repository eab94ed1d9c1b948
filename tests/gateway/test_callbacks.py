"""A call's callback URL gets the decision, signed with the agent's key (SHA-256 of its
token), once, after the decision is committed."""

import hashlib
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from approvals import decisions
from approvals.models import Approval
from gateway.models import ExternalCall
from runs.models import args_hash

from .conftest import AgentClient, make_agent


def _serve(host: str = "127.0.0.1", redirect_to: str = ""):
    """A local receiver: (its base URL, what it got, its server). It answers 204, or 302 to
    `redirect_to`."""
    got: list[tuple[dict, bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def _record(self):
            length = int(self.headers.get("Content-Length") or 0)
            got.append((dict(self.headers), self.rfile.read(length)))
            self.send_response(302 if redirect_to else 204)
            if redirect_to:
                self.send_header("Location", redirect_to)
                self.send_header("Content-Length", "0")
            self.end_headers()

        do_POST = do_GET = _record

        def log_message(self, *args):
            pass

    server = HTTPServer((host, 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://{host}:{server.server_port}", got, server


@pytest.fixture
def local_receivers_allowed(settings):
    # The test's receivers listen on loopback, which callbacks may not reach by default.
    settings.AGENTOPS = {**settings.AGENTOPS, "CALLBACK_ALLOWED_NETWORKS": ["127.0.0.1/32"]}


@pytest.fixture
def receiver(local_receivers_allowed):
    base, got, server = _serve()
    yield f"{base}/decided", got
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


# --- server-side request forgery ---------------------------------------------------------
def _gated_call(callback_url: str, slug: str = "ci-bot"):
    _, token = make_agent(slug)
    bot = AgentClient(token)
    session = bot.session()
    return bot, bot.call(session, "delete_branch", {"name": "dev"}, callback_url=callback_url)


def _decide_with_callbacks(body, approver, capture):
    approval = Approval.objects.get(pk=body["approval"])
    with capture(execute=True):
        decisions.decide(
            approval.pk,
            user=approver,
            decision="approve",
            shown_args_hash=args_hash(approval.tool, approval.args),
        )


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",  # cloud metadata (link-local)
        "http://127.0.0.1:6379/",  # Redis on this machine
        "http://[::1]:8000/",
        "http://[::ffff:127.0.0.1]/",  # IPv4 loopback mapped into IPv6
        "http://10.1.2.3/hook",
        "http://192.168.0.10/",
        "http://172.16.5.4/",
        "http://100.100.100.200/",  # shared address space: a cloud's metadata
        "http://0.0.0.0:8000/",
        "http://[fd00:ec2::254]/",  # a cloud's IPv6 metadata (unique local)
        "http://localhost:8000/",
        "http://api.localhost/",
        "file:///etc/passwd",
        "gopher://127.0.0.1:6379/",
        "http:///nohost",
        # IPv4 as the resolver reads it (inet_aton): short, decimal, hexadecimal, octal.
        "http://127.1:6379/",
        "http://2130706433:6379/",
        "http://0x7f000001:6379/",
        "http://017700000001:6379/",
        "http://0x7f.1/",
        "http://10.0x10203/",
        "http://0/",
    ],
)
def test_a_callback_url_to_an_inside_address_is_refused(db, url):
    _, response = _gated_call(url)
    assert response.status_code == 422, response.content
    assert not ExternalCall.objects.exists()


def test_a_public_address_or_name_is_accepted_when_submitted(db):
    _, by_address = _gated_call("https://93.184.215.14/hook")
    assert by_address.status_code == 202
    _, by_name = _gated_call("https://agent.example.com/hook", "other-bot")
    assert by_name.status_code == 202


@pytest.fixture
def name_to_loopback(monkeypatch):
    """callbacks.example.com resolves to 127.0.0.1 (as a hostile DNS record would)."""
    real = socket.getaddrinfo

    def fake(host, *args, **kwargs):
        if host == "callbacks.example.com" and not kwargs.get("flags", 0) & socket.AI_NUMERICHOST:
            host = "127.0.0.1"  # a lookup of the name; read as a number it is no address
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake)


def test_a_name_that_resolves_to_loopback_is_refused_when_the_callback_is_sent(
    db, eager, approver, name_to_loopback, django_capture_on_commit_callbacks, caplog
):
    base, got, server = _serve()
    port = base.rsplit(":", 1)[1]
    try:
        bot, response = _gated_call(f"http://callbacks.example.com:{port}/decided")
        assert response.status_code == 202  # a name is checked where it resolves
        _decide_with_callbacks(response.json(), approver, django_capture_on_commit_callbacks)
    finally:
        server.shutdown()
    assert got == []
    assert "resolves to 127.0.0.1 is a loopback" in caplog.text
    call = ExternalCall.objects.get()
    assert call.callback_sent_at is None
    # The agent still learns the decision by asking.
    assert bot.get(f"/calls/{call.pk}").json()["status"] == "approved"


def test_the_allow_list_lets_an_on_premise_receiver_through(
    db, eager, approver, name_to_loopback, settings, django_capture_on_commit_callbacks
):
    settings.AGENTOPS = {**settings.AGENTOPS, "CALLBACK_ALLOWED_NETWORKS": ["127.0.0.0/8"]}
    base, got, server = _serve()
    port = base.rsplit(":", 1)[1]
    try:
        _, response = _gated_call(f"http://callbacks.example.com:{port}/decided")
        _decide_with_callbacks(response.json(), approver, django_capture_on_commit_callbacks)
    finally:
        server.shutdown()
    assert len(got) == 1 and json.loads(got[0][1])["status"] == "approved"


def test_a_redirect_to_an_inside_address_is_not_followed(
    db, eager, approver, local_receivers_allowed, django_capture_on_commit_callbacks, caplog
):
    # The allowed receiver (127.0.0.1) redirects to 127.0.0.2, which is not allowed.
    inside, inside_got, inside_server = _serve("127.0.0.2")
    base, got, server = _serve(redirect_to=f"{inside}/admin")
    try:
        _, response = _gated_call(f"{base}/decided")
        _decide_with_callbacks(response.json(), approver, django_capture_on_commit_callbacks)
    finally:
        server.shutdown()
        inside_server.shutdown()
    assert len(got) == 1  # the allowed receiver got the decision...
    assert inside_got == []  # ...and its redirect led nowhere
    assert "127.0.0.2 is a loopback" in caplog.text
