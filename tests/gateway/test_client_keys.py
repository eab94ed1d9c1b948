"""The Python client's Idempotency-Key (clients/python): a fresh key on every call that
changes something, the same key on its own retries of that call, none on reads. Against a
scripted local HTTP server, so the lost answers are the test's to choose."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from agentops_client import AgentopsClient, AgentopsError
from agentops_client import client as client_module


class Scripted(ThreadingHTTPServer):
    """Answers each request with the next (status, headers, seconds to stall) of `script`,
    then 200; records (method, path, Idempotency-Key) of each."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.script: list[tuple[int, dict, float]] = []
        self.seen: list[tuple[str, str, str | None]] = []


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def _answer(self) -> None:
        server: Scripted = self.server  # type: ignore[assignment]
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        server.seen.append((self.command, self.path, self.headers.get("Idempotency-Key")))
        status, headers, stall = server.script.pop(0) if server.script else (200, {}, 0.0)
        time.sleep(stall)
        body = json.dumps({"detail": "scripted", "n": len(server.seen)}).encode()
        try:
            self.send_response(status)
            for name, value in {"Content-Type": "application/json", **headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up waiting: the answer is lost, as on a real network

    do_GET = do_POST = do_PUT = do_DELETE = _answer


@pytest.fixture
def server():
    scripted = Scripted()
    thread = threading.Thread(target=scripted.serve_forever, daemon=True)
    thread.start()
    yield scripted
    scripted.shutdown()
    scripted.server_close()


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch):
    monkeypatch.setattr(client_module, "RETRY_FIRST_SECONDS", 0.01)


@pytest.fixture
def client(server) -> AgentopsClient:
    return AgentopsClient(f"http://127.0.0.1:{server.server_port}", "aoa_test", request_timeout=2)


def test_each_call_that_changes_something_has_a_fresh_key_and_reads_have_none(server, client):
    client.request("POST", "/api/external/sessions", {"session": "a"})
    client.request("POST", "/api/external/sessions", {"session": "a"})
    client.request("GET", "/api/external/calls/x")
    client.request("DELETE", "/api/thing")
    (_, _, one), (_, _, two), (_, _, read), (_, _, delete) = server.seen
    assert one and two and delete and len({one, two, delete}) == 3
    assert len(one) >= 32
    assert read is None


def test_a_call_whose_answer_was_lost_is_retried_with_the_same_key(server, client):
    server.script = [(503, {"Retry-After": "0"}, 0.0), (502, {}, 0.0)]
    answer = client.request("POST", "/api/external/sessions", {"session": "a"})
    assert answer["n"] == 3
    keys = [key for _, _, key in server.seen]
    assert len(keys) == 3 and len(set(keys)) == 1 and keys[0]


def test_a_timed_out_call_is_retried_with_the_same_key(server):
    client = AgentopsClient(f"http://127.0.0.1:{server.server_port}", "t", request_timeout=0.5)
    server.script = [(200, {}, 1.5)]  # done, but the answer comes too late
    assert client.request("POST", "/api/runs", {"x": 1})["n"] == 2
    first, retry = (key for _, _, key in server.seen)
    assert first == retry and first


def test_a_call_still_in_progress_is_asked_again_and_other_refusals_are_not(server, client):
    server.script = [(409, {"Retry-After": "0"}, 0.0)]
    assert client.request("POST", "/api/runs", {"x": 1})["n"] == 2
    assert len({key for _, _, key in server.seen}) == 1
    server.seen.clear()
    server.script = [(409, {}, 0.0)]  # a plain conflict: an answer, not a lost one
    with pytest.raises(AgentopsError) as refused:
        client.request("POST", "/api/runs", {"x": 1})
    assert refused.value.status == 409 and len(server.seen) == 1


def test_the_callers_own_key_is_sent_and_retries_stop_after_the_attempts(server):
    client = AgentopsClient(f"http://127.0.0.1:{server.server_port}", "t", attempts=2)
    server.script = [(503, {}, 0.0)] * 3
    with pytest.raises(AgentopsError) as failed:
        client.request("POST", "/api/runs", {"x": 1}, idempotency_key="launch-42")
    assert failed.value.status == 503
    assert [key for _, _, key in server.seen] == ["launch-42", "launch-42"]


def test_a_read_is_tried_once(server, client):
    server.script = [(503, {}, 0.0)]
    with pytest.raises(AgentopsError):
        client.request("GET", "/api/external/calls/x")
    assert len(server.seen) == 1
