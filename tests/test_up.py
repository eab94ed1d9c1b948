"""`manage.py up` is the product's one command: these tests run it for real.

A subprocess serves on a free port with a fresh SQLite database (embedded mode: in-process
Celery worker on the memory transport, in-memory channel layer). The test logs in like a
browser, launches a run through the API, watches every step arrive over WebSockets, checks the
database, then stops the server with SIGTERM.
"""

import http.cookiejar
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
from websockets.sync.client import connect as ws_connect

from tests.livesupport import kill_up, opener, start_up, stop_up

PASSWORD = "demo-password-for-tests"
# Generous: only an event that never comes reaches it (timings are for bench/live_latency.py).
EVENT_DEADLINE = 30


@pytest.fixture
def up_server(tmp_path):
    server = start_up(tmp_path, AGENTOPS_DEMO_PASSWORD=PASSWORD)
    yield server
    kill_up(server)


class Browser:
    """Just enough of a browser: cookies, CSRF token, JSON."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = opener(self.jar)

    def cookie(self, name: str) -> str:
        return next((c.value for c in self.jar if c.name == name), "")

    def request(self, method: str, path: str, *, data=None, json_body=None, headers=None):
        headers = dict(headers or {})
        body = None
        if json_body is not None:
            body = json.dumps(json_body).encode()
            headers["Content-Type"] = "application/json"
        elif data is not None:
            body = urllib.parse.urlencode(data).encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        if method != "GET":
            headers["X-CSRFToken"] = self.cookie("csrftoken")
            headers["Referer"] = self.base + path
        req = urllib.request.Request(self.base + path, data=body, method=method, headers=headers)
        try:
            with self.opener.open(req, timeout=15) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def login(self, username: str, password: str) -> None:
        status, _ = self.request("GET", "/accounts/login/")
        assert status == 200 and self.cookie("csrftoken")
        status, body = self.request(
            "POST",
            "/accounts/login/",
            data={
                "username": username,
                "password": password,
                "csrfmiddlewaretoken": self.cookie("csrftoken"),
            },
        )
        assert self.cookie("sessionid"), f"login as {username} failed ({status}): {body[:500]}"

    def ws(self, path: str):
        ws_url = self.base.replace("http://", "ws://") + path
        return ws_connect(
            ws_url,
            origin=self.base,
            additional_headers={"Cookie": f"sessionid={self.cookie('sessionid')}"},
            proxy=None,
            open_timeout=10,
        )


def receive_until(ws, done, what: str) -> list[str]:
    """Messages until done(messages) is true; fails when that never happens (EVENT_DEADLINE)."""
    got: list[str] = []
    deadline = time.monotonic() + EVENT_DEADLINE
    while not done(got):
        try:
            got.append(ws.recv(timeout=max(0.01, deadline - time.monotonic())))
        except TimeoutError:
            pytest.fail(f"{what}: not received within {EVENT_DEADLINE} s; got {got}")
    return got


def step_seq(message: str) -> int:
    """The seq of the step a run stream message carries (JSON, or the step's HTML)."""
    if message.lstrip().startswith("{"):
        return json.loads(message)["seq"]
    [seq] = re.findall(r'<article class="step[^"]*" id="step-(\d+)"', message)
    return int(seq)


def parked(run_id: str):
    """done() for the dashboard stream: the run's model call, then the run parking itself
    (a status step) after the call is gated."""

    def done(messages: list[str]) -> bool:
        kinds = [e["kind"] for e in map(json.loads, messages) if e["run_id"] == run_id]
        return "llm" in kinds and "status" in kinds[kinds.index("llm") :]

    return done


def test_up_serves_a_run_live_and_stops_on_sigterm(up_server):
    server = up_server
    out = server.output
    assert f"agentops is up: {server.url}/" in out
    assert "embedded mode" in out
    for login in ("operator", "approver", "admin"):
        assert login in out
    assert PASSWORD in out

    browser = Browser(server.url)
    browser.login("operator", PASSWORD)

    def launch() -> str:
        status, body = browser.request(
            "POST",
            "/api/runs",
            json_body={
                "agent": "refund-desk",
                "input": {"order_id": 42, "amount": "1.00", "reason": "Arrived damaged"},
            },
        )
        assert status in (200, 201), body
        created = json.loads(body)
        return str(created.get("id") or created.get("run_id"))

    # Watch the dashboard stream before launching: every step of the run is then live.
    with browser.ws("/ws/runs/?format=json") as dashboard:
        run_id = launch()
        messages = receive_until(dashboard, parked(run_id), "the run parking itself")
        # A second run is the marker: its events come after every event of the first, so
        # once it has parked, a repeat of any of the first run's events would be here too.
        marker_id = launch()
        messages += receive_until(
            dashboard, parked(marker_id), "the marker run parking itself (after the first)"
        )
    mine = [e for e in map(json.loads, messages) if e["run_id"] == run_id]

    # issue_refund is irreversible with a high blast radius: the policy gates it even for
    # 1.00 (below the 500 threshold), so the run parks itself waiting for an approver.
    state = json.loads(
        server.manage(
            "import json\n"
            "from runs.models import Run\n"
            "from approvals.models import Approval\n"
            f"run = Run.objects.get(pk='{run_id}')\n"
            "steps = {s.seq: s.kind for s in run.steps.all()}\n"
            "approvals = list(Approval.objects.filter(run=run).values('tool', 'status'))\n"
            "print(json.dumps({'status': run.status, 'steps': steps, 'approvals': approvals,\n"
            "                  'chain': run.verify_chain()[0]}))\n"
        )
        .strip()
        .splitlines()[-1]
    )
    assert state["status"] == "waiting", state
    assert state["approvals"] == [{"tool": "issue_refund", "status": "pending"}]
    assert state["chain"] is True
    steps = {int(seq): kind for seq, kind in state["steps"].items()}
    kinds = [steps[seq] for seq in sorted(steps)]
    assert kinds[0] == "status" and "llm" in kinds and "tool" in kinds and "gate" in kinds

    # Every step that changes the run's row reached the dashboard, in order, once. The
    # dashboard stream has no catch-up and no poll: each event came from the worker thread's
    # send, handed to the server's event loop while the socket was open.
    seqs = [e["seq"] for e in mine]
    assert seqs == [seq for seq in sorted(steps) if steps[seq] in ("status", "llm")], (
        seqs,
        kinds,
    )

    # The run's own stream: what the browser missed (all of it), in order, once. Cancelling
    # the run is the marker: its step comes after the catch-up, so a replay would be seen.
    with browser.ws(f"/ws/runs/{run_id}/") as run_ws:
        got = receive_until(run_ws, lambda m: len(m) >= len(steps), "the run's steps")
        status, body = browser.request("POST", f"/api/runs/{run_id}/cancel")
        assert status == 200, body
        got += receive_until(
            run_ws, lambda m: bool(m) and step_seq(m[-1]) > max(steps), "the cancellation's step"
        )
    assert [step_seq(m) for m in got] == [*sorted(steps), max(steps) + 1], got

    stop_up(server)
    assert server.proc.returncode == 0, server.output
    assert "agentops stopped." in server.output


@pytest.mark.django_db
def test_demo_users_get_their_roles_and_a_password_that_survives_restarts(
    settings, tmp_path, monkeypatch
):
    from django.contrib.auth import authenticate
    from django.test import RequestFactory

    from agentops.management.commands.seed_demo import PASSWORD_ENV, ensure_demo_users

    settings.VAR_DIR = tmp_path
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    first = ensure_demo_users()
    assert first.created == ("operator", "approver", "admin")
    assert first.password and len(first.password) >= 12
    assert (tmp_path / "demo-password").stat().st_mode & 0o077 == 0  # not world-readable

    again = ensure_demo_users()
    assert again.created == () and again.password == first.password

    # As a sign-in does: with its request (django-axes throttles by it).
    request = RequestFactory().post("/accounts/login/")
    operator = authenticate(request, username="operator", password=first.password)
    approver = authenticate(request, username="approver", password=first.password)
    admin = authenticate(request, username="admin", password=first.password)
    assert operator.can_operate and operator.can_view and not operator.can_approve
    assert approver.can_approve and approver.can_view and not approver.can_operate
    assert admin.is_admin and admin.is_staff and admin.is_superuser
    assert not operator.is_staff and not approver.is_superuser

    # An explicit password is what the environment says it should be: applied to existing users.
    monkeypatch.setenv(PASSWORD_ENV, "another-demo-password")
    assert ensure_demo_users().password == "another-demo-password"
    assert authenticate(request, username="approver", password="another-demo-password")


def test_up_parses_addresses_like_runserver():
    from django.core.management.base import CommandError

    from agentops.management.commands.up import parse_addrport

    assert parse_addrport("8001") == ("127.0.0.1", 8001)
    assert parse_addrport("0.0.0.0:8080") == ("0.0.0.0", 8080)
    assert parse_addrport("[::1]:8000") == ("::1", 8000)
    assert parse_addrport("localhost:9000") == ("localhost", 9000)
    with pytest.raises(CommandError):
        parse_addrport("nope:port")


def test_links_follow_the_address_up_listens_on():
    # `up 0.0.0.0:8080` must not hand out links to port 8000 (one-tap e-mails, callbacks).
    from agentops.management.commands.up import public_url

    assert public_url("0.0.0.0", 8080) == "http://127.0.0.1:8080"
    assert public_url("localhost", 9000) == "http://localhost:9000"
    assert public_url("::1", 8000) == "http://[::1]:8000"
