"""What the gateway does when an external agent's callback receiver fails (gateway/callbacks.py),
against a real HTTP receiver on 127.0.0.1: unreachable, a slow answer, 5xx / 408 / 429 are
retried; another 4xx is given up at once; retries end after max_retries; a callback is
marked sent only once it was delivered or refused for good, and never sent twice. The
decision itself stands whatever the receiver does."""

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentops.celery import app as celery_app
from approvals import decisions
from approvals.models import Approval
from approvals.notify.delivery import DeliveryError
from gateway import callbacks
from gateway.models import ExternalCall
from runs.models import args_hash

from .conftest import AgentClient, make_agent

pytestmark = pytest.mark.django_db


class Receiver:
    """An HTTP server answering each POST with the next status of `statuses` (the last one
    repeats), or holding the answer until released when the status is None."""

    def __init__(self, statuses: list[int | None]):
        self.statuses = list(statuses)
        self.hits = 0
        self.release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                index = min(receiver.hits, len(receiver.statuses) - 1)
                receiver.hits += 1
                status = receiver.statuses[index]
                if status is None:
                    receiver.release.wait(10)
                    status = 204
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/decided"

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(autouse=True)
def _loopback_receivers_allowed(settings):
    # Receivers on this machine: allowed explicitly where callbacks refuse inside addresses.
    settings.AGENTOPS = {**settings.AGENTOPS, "CALLBACK_ALLOWED_NETWORKS": ["127.0.0.1/32"]}


@pytest.fixture
def receiver():
    made: list[Receiver] = []

    def make(*statuses: int | None) -> Receiver:
        made.append(Receiver(list(statuses)))
        return made[-1]

    yield make
    for r in made:
        r.close()


def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (the port was just free)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/decided"


def decided_call(url: str, approver, decision: str = "approve") -> ExternalCall:
    """An external call with a callback URL, decided; its callback not sent yet (the test
    transaction never commits, so nothing was queued)."""
    _, token = make_agent()
    bot = AgentClient(token)
    body = bot.call(bot.session(), "delete_branch", {"name": "dev"}, callback_url=url).json()
    approval = Approval.objects.get(pk=body["approval"])
    decisions.decide(
        approval.pk,
        user=approver,
        decision=decision,
        reason="not today" if decision == "reject" else "",
        shown_args_hash=args_hash(approval.tool, approval.args),
    )
    return ExternalCall.objects.get(pk=body["call"])


def sent_at(call: ExternalCall):
    return ExternalCall.objects.get(pk=call.pk).callback_sent_at


def test_an_unreachable_receiver_is_a_delivery_error_and_the_call_is_not_marked_sent(approver):
    call = decided_call(closed_port_url(), approver)
    with pytest.raises(DeliveryError, match="unreachable"):
        callbacks.deliver_callback(str(call.approval_id))
    assert sent_at(call) is None


@pytest.mark.parametrize("status", [500, 502, 503, 408, 429])
def test_a_server_error_timeout_or_rate_limit_answer_is_retried(approver, receiver, status):
    failing = receiver(status)
    call = decided_call(failing.url, approver)
    with pytest.raises(DeliveryError, match=f"answered {status}"):
        callbacks.deliver_callback(str(call.approval_id))
    assert failing.hits == 1
    assert sent_at(call) is None


@pytest.mark.parametrize("status", [400, 401, 404, 410])
def test_another_client_error_is_given_up_at_once_and_never_sent_again(approver, receiver, status):
    refusing = receiver(status)
    call = decided_call(refusing.url, approver, decision="reject")
    assert callbacks.deliver_callback(str(call.approval_id)) == status
    assert sent_at(call) is not None
    assert callbacks.deliver_callback(str(call.approval_id)) == 0
    assert refusing.hits == 1


def test_a_receiver_that_does_not_answer_in_time_is_a_delivery_error(
    approver, receiver, monkeypatch
):
    silent = receiver(None)
    monkeypatch.setattr(callbacks, "CALLBACK_TIMEOUT_SECONDS", 0.2)
    call = decided_call(silent.url, approver)
    with pytest.raises(DeliveryError, match="unreachable"):
        callbacks.deliver_callback(str(call.approval_id))
    assert sent_at(call) is None
    silent.release.set()


def test_a_delivered_callback_is_marked_sent_and_never_sent_twice(approver, receiver):
    ok = receiver(204)
    call = decided_call(ok.url, approver)
    assert callbacks.deliver_callback(str(call.approval_id)) == 204
    assert sent_at(call) is not None
    assert callbacks.deliver_callback(str(call.approval_id)) == 0
    assert ok.hits == 1


def test_a_failing_receiver_is_retried_until_it_answers(approver, receiver):
    flaky = receiver(503, 500, 204)
    call = decided_call(flaky.url, approver)
    result = callbacks.deliver_callback.apply(args=[str(call.approval_id)])
    assert result.successful()
    assert result.result == 204
    assert flaky.hits == 3
    assert sent_at(call) is not None


def test_retries_end_after_max_retries_and_the_call_stays_unsent(approver, receiver):
    down = receiver(503)
    call = decided_call(down.url, approver)
    result = callbacks.deliver_callback.apply(args=[str(call.approval_id)])
    assert result.failed()
    assert isinstance(result.result, DeliveryError)
    assert down.hits == 1 + callbacks.RETRIED_DELIVERY["max_retries"]
    assert sent_at(call) is None


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/decided", "file:///etc/passwd", ""])
def test_a_stored_url_that_is_not_http_is_never_opened(approver, url):
    call = decided_call(closed_port_url(), approver)
    ExternalCall.objects.filter(pk=call.pk).update(callback_url=url)
    assert callbacks.deliver_callback(str(call.approval_id)) == 0
    assert sent_at(call) is None


def test_an_approval_with_no_external_call_sends_nothing(db):
    assert callbacks.deliver_callback("00000000-0000-0000-0000-000000000000") == 0


@pytest.fixture
def eager():
    before = celery_app.conf.CELERY_TASK_ALWAYS_EAGER
    celery_app.conf.CELERY_TASK_ALWAYS_EAGER = True
    yield
    celery_app.conf.CELERY_TASK_ALWAYS_EAGER = before


def test_a_decision_stands_when_its_callback_cannot_be_delivered(
    approver, receiver, eager, django_capture_on_commit_callbacks
):
    down = receiver(500)
    _, token = make_agent()
    bot = AgentClient(token)
    body = bot.call(bot.session(), "delete_branch", {"name": "dev"}, callback_url=down.url).json()
    approval = Approval.objects.get(pk=body["approval"])
    with django_capture_on_commit_callbacks(execute=True):
        decisions.decide(
            approval.pk,
            user=approver,
            decision="approve",
            shown_args_hash=args_hash(approval.tool, approval.args),
        )
    assert down.hits == 1 + callbacks.RETRIED_DELIVERY["max_retries"]
    assert Approval.objects.get(pk=approval.pk).status == Approval.Status.APPROVED
    assert ExternalCall.objects.get(pk=body["call"]).callback_sent_at is None
    # The agent still learns the decision by asking for its call.
    assert bot.get(f"/calls/{body['call']}").json()["status"] == "approved"


def test_a_decision_stands_when_its_callback_cannot_be_queued(
    approver, receiver, monkeypatch, django_capture_on_commit_callbacks
):
    ok = receiver(204)
    _, token = make_agent()
    bot = AgentClient(token)
    body = bot.call(bot.session(), "delete_branch", {"name": "dev"}, callback_url=ok.url).json()
    approval = Approval.objects.get(pk=body["approval"])

    def broker_down(*args, **kwargs):
        raise ConnectionError("broker unreachable")

    monkeypatch.setattr(callbacks.deliver_callback, "delay", broker_down)
    with django_capture_on_commit_callbacks(execute=True) as queued:
        decisions.decide(
            approval.pk,
            user=approver,
            decision="approve",
            shown_args_hash=args_hash(approval.tool, approval.args),
        )
    assert queued  # the callback was to be queued once committed
    assert Approval.objects.get(pk=approval.pk).status == Approval.Status.APPROVED
    assert ok.hits == 0
    assert ExternalCall.objects.get(pk=body["call"]).callback_sent_at is None
