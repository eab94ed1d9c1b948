"""Approval notifications: signed webhooks to a real local HTTP server, Slack payloads,
retries that never touch the run, and e-mail to the approvers."""

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import mail
from django.core.mail.backends.locmem import EmailBackend as LocmemBackend
from django.db import transaction
from django.utils import timezone
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from agentkit import signing
from agentkit.agents import get_agent
from approvals import tasks
from approvals.models import Approval
from approvals.notify import email, webhooks
from demo.models import OutboxEmail
from runs import engine
from runs.models import Run, Step

SECRET = "test-webhook-secret"
PUBLIC = "https://agentops.example"


class Endpoint:
    """A webhook receiver on 127.0.0.1 answering a planned sequence of status codes."""

    def __init__(self, *statuses: int, default: int = 200):
        self.plan = list(statuses)
        self.default = default
        self.requests: list[dict] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                endpoint.requests.append(
                    {
                        "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": body,
                    }
                )
                code = endpoint.plan.pop(0) if endpoint.plan else endpoint.default
                self.send_response(code)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint():
    made: list[Endpoint] = []

    def make(*statuses: int, default: int = 200) -> Endpoint:
        made.append(Endpoint(*statuses, default=default))
        return made[-1]

    yield make
    for e in made:
        e.close()


def configure(settings, *urls: str, secret: str | list[str] = SECRET, email: bool = False) -> None:
    settings.AGENTOPS = {
        **settings.AGENTOPS,
        "WEBHOOK_URLS": list(urls),
        "WEBHOOK_SECRET": secret,
        "PUBLIC_URL": PUBLIC,
        "NOTIFY_EMAIL": email,
        "WEBHOOK_TIMEOUT_SECONDS": 2.0,
    }


def gate_a_run(user, question: str = "Revenue?") -> tuple[Run, Approval]:
    """The SQL analyst e-mails a report to an address off its allow-list: gated."""
    agent = get_agent("sql-analyst")
    data, errors = agent.validate_input({"question": question, "report_to": "boss@example.com"})
    assert not errors
    run = engine.launch(agent=agent, input=data, launched_by=user, provider="scripted")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    return run, Approval.objects.get(run=run)


def approve(approval: Approval, user) -> None:
    with transaction.atomic():
        run = Run.locked(approval.run_id)
        Approval.objects.filter(pk=approval.pk).update(
            status=Approval.Status.APPROVED, decided_at=timezone.now(), decided_by=user
        )
        assert run.resume("all decisions made")


# --- webhooks -----------------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_webhook_is_signed_and_carries_what_an_approver_needs(
    settings, endpoint, eager, operator, no_enqueue
):
    hook = endpoint()
    configure(settings, hook.url)
    run, approval = gate_a_run(operator)

    assert len(hook.requests) == 1
    request = hook.requests[0]
    headers, body = request["headers"], request["body"]
    assert request["path"] == "/hook"
    assert headers["content-type"] == "application/json"
    # Standard Webhooks, checked as a receiver would, with the reference library.
    timestamp = headers["webhook-timestamp"]
    assert abs(time.time() - int(timestamp)) < 60
    assert headers["webhook-signature"].startswith("v1,")
    assert Webhook(SECRET.encode()).verify(body, headers) == json.loads(body)
    # The deprecated scheme is off by default: none of its headers (test_budget.py has them).
    assert "x-agentops-signature" not in headers and "x-agentops-delivery" not in headers

    data = json.loads(body)
    assert data["event"] == "approval.requested"
    assert data["approval"]["id"] == str(approval.pk)
    assert data["approval"]["tool"] == "email_report"
    assert data["approval"]["args"]["to"] == "boss@example.com"
    assert data["approval"]["explanation"] == approval.explanation
    assert "not on the allow-list" in data["approval"]["explanation"]
    assert data["approval"]["risk"] == "medium"
    assert data["approval"]["status"] == "pending"
    assert data["approval"]["url"] == f"{PUBLIC}/approvals/{approval.pk}/"
    assert data["run"]["id"] == str(run.pk)
    assert data["run"]["agent"] == "sql-analyst"
    assert data["run"]["launched_by"] == "olivia"
    assert data["run"]["url"] == f"{PUBLIC}/runs/{run.pk}/"


@pytest.mark.django_db(transaction=True)
def test_a_tampered_stale_or_foreign_webhook_fails_verification(
    settings, endpoint, eager, operator, no_enqueue
):
    hook = endpoint()
    configure(settings, hook.url)
    gate_a_run(operator)
    request = hook.requests[0]
    headers, body = request["headers"], request["body"]
    receiver = Webhook(SECRET.encode())

    receiver.verify(body, headers)
    for tampered in (
        (body.replace(b"boss@", b"evil@"), headers),
        # A fresh timestamp or id does not match: both are signed with the body.
        (body, {**headers, "webhook-timestamp": str(int(headers["webhook-timestamp"]) + 1)}),
        (body, {**headers, "webhook-id": "another"}),
    ):
        with pytest.raises(WebhookVerificationError):
            receiver.verify(*tampered)
    with pytest.raises(WebhookVerificationError):
        Webhook(b"another-secret").verify(body, headers)
    # A captured request replayed ten minutes later is stale.
    old = int(time.time()) - 600
    stale = signing.sign(SECRET, headers["webhook-id"], body, timestamp=old)
    with pytest.raises(WebhookVerificationError, match="too old"):
        receiver.verify(body, stale)


@pytest.mark.django_db(transaction=True)
def test_while_a_key_rotates_every_key_signs(settings, endpoint, eager, operator, no_enqueue):
    hook = endpoint()
    new = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3ODk="
    configure(settings, hook.url, secret=[SECRET, new])
    settings.AGENTOPS = {**settings.AGENTOPS, "WEBHOOK_LEGACY_SIGNATURES": False}
    gate_a_run(operator)
    headers, body = hook.requests[0]["headers"], hook.requests[0]["body"]
    assert len(headers["webhook-signature"].split()) == 2
    # A receiver holding either key accepts it.
    Webhook(SECRET.encode()).verify(body, headers)
    Webhook(new).verify(body, headers)
    # The deprecated headers are gone once the legacy scheme is off.
    assert "x-agentops-signature" not in headers and "x-agentops-delivery" not in headers


@pytest.mark.django_db(transaction=True)
def test_a_failing_endpoint_is_retried_and_the_run_goes_on(
    settings, endpoint, eager, operator, approver, no_enqueue
):
    hook = endpoint(500, 503)  # then 200
    configure(settings, hook.url)
    run, approval = gate_a_run(operator)

    assert len(hook.requests) == 3
    deliveries = {r["headers"]["webhook-id"] for r in hook.requests}
    assert len(deliveries) == 1  # one delivery, retried: the receiver can de-duplicate
    for r in hook.requests:
        Webhook(SECRET.encode()).verify(r["body"], r["headers"])
    run.refresh_from_db()
    assert run.status == Run.Status.WAITING
    assert not run.steps.filter(kind=Step.Kind.LLM_ERROR).exists()

    approve(approval, approver)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    assert [m.to for m in mail.outbox] == [["boss@example.com"]]  # the report itself
    assert len(hook.requests) == 3  # a decision is not a new request


@pytest.mark.django_db(transaction=True)
def test_an_endpoint_that_never_recovers_is_given_up_and_never_touches_the_run(
    settings, endpoint, eager, operator, no_enqueue
):
    dead = endpoint(default=500)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/hook"
    healthy = endpoint()
    configure(settings, dead.url, closed, healthy.url)

    run, approval = gate_a_run(operator)

    assert len(dead.requests) == 1 + tasks.deliver_approval_webhook.max_retries
    assert len(healthy.requests) == 1  # one dead endpoint does not hold the others back
    run.refresh_from_db()
    assert run.status == Run.Status.WAITING
    assert approval.status == Approval.Status.PENDING
    assert run.verify_chain() == (True, None)


@pytest.mark.django_db(transaction=True)
def test_a_client_error_is_not_retried(settings, endpoint, eager, operator, no_enqueue):
    hook = endpoint(default=400)
    configure(settings, hook.url)
    run, _ = gate_a_run(operator)
    assert len(hook.requests) == 1
    run.refresh_from_db()
    assert run.status == Run.Status.WAITING


@pytest.mark.django_db(transaction=True)
def test_slack_urls_get_a_slack_payload_with_model_text_escaped(
    settings, endpoint, eager, operator, no_enqueue
):
    slack = endpoint()
    configure(settings, "slack+" + slack.url)
    _, approval = gate_a_run(operator, question="Revenue? <!channel> & <https://evil.test|click>")

    assert len(slack.requests) == 1
    data = json.loads(slack.requests[0]["body"])
    assert set(data) == {"text", "blocks"}
    assert data["text"].startswith("Approval needed: email_report (medium risk) in sql-analyst")
    assert data["text"].endswith(f"{PUBLIC}/approvals/{approval.pk}/")
    section = data["blocks"][0]["text"]["text"]
    assert "not on the allow-list" in section
    assert "&lt;!channel&gt; &amp; &lt;https://evil.test|click&gt;" in section
    assert "<!channel>" not in json.dumps(data["blocks"])
    button = data["blocks"][-1]["elements"][0]
    assert button["url"] == f"{PUBLIC}/approvals/{approval.pk}/"


def test_slack_urls_are_recognised_by_prefix_or_host():
    assert webhooks.target("slack+https://chat.internal/hook") == (
        "https://chat.internal/hook",
        True,
    )
    assert webhooks.target("https://hooks.slack.com/services/T/B/X") == (
        "https://hooks.slack.com/services/T/B/X",
        True,
    )
    assert webhooks.target("https://example.com/slack") == ("https://example.com/slack", False)


@pytest.mark.django_db(transaction=True)
def test_generic_webhooks_are_not_sent_without_a_secret(
    settings, endpoint, eager, operator, no_enqueue
):
    generic, slack = endpoint(), endpoint()
    configure(settings, generic.url, "slack+" + slack.url, secret="")
    run, _ = gate_a_run(operator)
    assert generic.requests == []
    assert len(slack.requests) == 1
    assert "x-agentops-signature" not in slack.requests[0]["headers"]
    assert "webhook-signature" not in slack.requests[0]["headers"]
    run.refresh_from_db()
    assert run.status == Run.Status.WAITING


@pytest.mark.django_db(transaction=True)
def test_a_broker_failure_when_queueing_never_reaches_the_run(
    settings, operator, no_enqueue, monkeypatch
):
    configure(settings, "http://127.0.0.1:9/hook")

    def broken(*args, **kwargs):
        raise ConnectionError("broker down")

    monkeypatch.setattr(tasks.notify_approval_requested, "delay", broken)
    run, approval = gate_a_run(operator)
    assert approval.status == Approval.Status.PENDING
    run.refresh_from_db()
    assert run.status == Run.Status.WAITING


# --- e-mail -------------------------------------------------------------------------------------
def with_email(user, address: str):
    user.email = address
    user.save(update_fields=["email"])
    return user


@pytest.mark.django_db(transaction=True)
def test_approvers_with_an_address_get_the_email(
    settings, eager, operator, approver, admin_user, viewer, django_user_model, no_enqueue
):
    from tests.conftest import make_user

    configure(settings, email=True)
    with_email(approver, "arthur@example.com")
    with_email(admin_user, "ada@example.com")
    with_email(viewer, "victor@example.com")
    with_email(operator, "olivia@example.com")
    make_user(django_user_model, "nomail", "approver")
    gone = with_email(make_user(django_user_model, "gone", "approver"), "gone@example.com")
    gone.is_active = False
    gone.save()

    run, approval = gate_a_run(operator)

    # One message per approver: each carries that approver's own one-tap link.
    assert [m.to for m in mail.outbox] == [["ada@example.com"], ["arthur@example.com"]]
    for message, user in zip(mail.outbox, (admin_user, approver), strict=True):
        assert (
            message.subject
            == "[agentops] Approval needed: email_report (medium risk) in sql-analyst"
        )
        assert approval.explanation in message.body
        assert "Arguments: " in message.body and "boss@example.com" in message.body
        assert f"Decide: {PUBLIC}/approvals/{approval.pk}/" in message.body
        assert f"Run: {PUBLIC}/runs/{run.pk}/" in message.body
        assert f"{PUBLIC}/approvals/link/" in message.body
        assert (
            message.extra_headers["X-Idempotency-Key"]
            == f"approval-requested:{approval.pk}:{user.pk}"
        )


@pytest.mark.django_db(transaction=True)
def test_an_agents_named_approvers_get_the_email_instead(
    settings, operator, approver, django_user_model, no_enqueue
):
    from tests.conftest import make_user

    configure(settings, email=True)
    with_email(approver, "arthur@example.com")
    with_email(make_user(django_user_model, "bea", "approver"), "bea@example.com")
    run, approval = gate_a_run(operator)
    run.agent_config["gates"]["approvers"] = ["bea"]
    run.save(update_fields=["agent_config"])
    approval.refresh_from_db()
    assert email.approver_emails(approval) == ["bea@example.com"]


class FlakyBackend(LocmemBackend):
    failures = 0

    def send_messages(self, messages):
        if FlakyBackend.failures:
            FlakyBackend.failures -= 1
            raise ConnectionRefusedError("smtp down")
        return super().send_messages(messages)


@pytest.mark.django_db(transaction=True)
def test_a_failing_mail_server_is_retried(settings, eager, operator, approver, no_enqueue):
    configure(settings, email=True)
    settings.EMAIL_BACKEND = f"{__name__}.FlakyBackend"
    FlakyBackend.failures = 2
    with_email(approver, "arthur@example.com")
    run, _ = gate_a_run(operator)
    assert FlakyBackend.failures == 0
    assert [m.to for m in mail.outbox] == [["arthur@example.com"]]
    run.refresh_from_db()
    assert run.status == Run.Status.WAITING


@pytest.mark.django_db(transaction=True)
def test_a_retried_email_lands_once_in_the_outbox(settings, operator, approver, no_enqueue):
    configure(settings, email=True)
    settings.EMAIL_BACKEND = "demo.mail.OutboxEmailBackend"
    with_email(approver, "arthur@example.com")
    _, approval = gate_a_run(operator)
    assert email.send_email(str(approval.pk)) == 1
    assert email.send_email(str(approval.pk)) == 1  # a retry after a lost acknowledgement
    assert OutboxEmail.objects.filter(to=["arthur@example.com"]).count() == 1


@pytest.mark.django_db(transaction=True)
def test_no_email_when_turned_off_or_nobody_has_an_address(settings, eager, operator, no_enqueue):
    configure(settings, email=True)
    gate_a_run(operator)  # operator has no address and is not an approver
    configure(settings, email=False)
    gate_a_run(operator)
    assert mail.outbox == []
