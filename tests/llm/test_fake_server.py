"""The fake Messages API itself: it must refuse what the real API refuses, answer many
clients at once, and run from the command line."""

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agentkit.agents import get_agent
from agentkit.llm import LLMError, LLMRequest
from agentkit.llm.anthropic import AnthropicProvider
from runs import engine
from runs.models import Run, Step
from tests.support.fake_messages_api import FakeMessagesServer, hang, reply, text, tool_use

from .conftest import API_KEY

ROOT = Path(__file__).resolve().parents[2]


def post(
    url: str, body: dict, headers: dict | None = None, *, timeout: float = 5
) -> tuple[int, dict, dict]:
    request = urllib.request.Request(
        url + "/v1/messages",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", **(headers or {})},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.loads(error.read())


def ask(messages: list[dict], **overrides) -> LLMRequest:
    fields = {"model": "claude-haiku-4-5", "system": "", "tools": [], **overrides}
    return LLMRequest(messages=messages, **fields)


def test_it_answers_like_the_messages_api(fake_api):
    fake_api.push(reply([text("Hello.")], usage={"cache_creation_input_tokens": 12}))
    status, headers, body = post(
        fake_api.base_url,
        {
            "model": "claude-haiku-4-5",
            "max_tokens": 10,
            "messages": [{"role": "user", "content": "hi"}],
        },
        {"x-api-key": "k"},
    )
    assert status == 200
    assert headers["request-id"].startswith("req_")
    assert body["id"].startswith("msg_") and body["type"] == "message"
    assert body["role"] == "assistant" and body["model"] == "claude-haiku-4-5"
    assert body["content"] == [{"type": "text", "text": "Hello."}]
    assert body["stop_reason"] == "end_turn" and body["stop_sequence"] is None
    assert body["usage"]["cache_creation_input_tokens"] == 12
    assert body["usage"]["cache_read_input_tokens"] == 0
    assert body["usage"]["input_tokens"] > 0 and body["usage"]["output_tokens"] > 0


def test_it_requires_a_key(fake_api):
    status, _, body = post(
        fake_api.base_url,
        {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert status == 401
    assert body["type"] == "error" and body["error"]["type"] == "authentication_error"
    assert fake_api.requests[0].headers.get("authorization") is None


@pytest.mark.parametrize(
    ("messages", "complaint"),
    [
        (
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [tool_use("list_tables")]},
                {"role": "user", "content": "go on"},
            ],
            "without `tool_result` blocks",
        ),
        (
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [text("No tool this time.")]},
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": ""}],
                },
            ],
            "unexpected `tool_use_id`",
        ),
        (
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{**tool_use("x"), "id": "t", "input": "?"}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]},
            ],
            "valid dictionary",
        ),
        ([{"role": "assistant", "content": "hi"}], "first message must use the user role"),
        ([], "at least one message"),
    ],
    ids=[
        "unanswered-tool-use",
        "orphan-tool-result",
        "input-not-object",
        "assistant-first",
        "empty",
    ],
)
def test_it_refuses_what_the_real_api_refuses(fake_api, messages, complaint):
    fake_api.push(reply([text("must not be used")]))
    body = {"model": "claude-haiku-4-5", "max_tokens": 10, "messages": messages}
    status, headers, answer = post(fake_api.base_url, body, {"x-api-key": "k"})
    assert status == 400
    assert answer["error"]["type"] == "invalid_request_error"
    assert complaint in answer["error"]["message"]
    assert answer["request_id"] == headers["request-id"]
    assert fake_api.remaining == 1  # a refused request does not use up the script


def test_the_provider_reports_a_refused_request_as_not_retryable(fake_api):
    unanswered = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [tool_use("list_tables")]},
        {"role": "user", "content": "go on"},
    ]
    with pytest.raises(LLMError) as refused:
        AnthropicProvider.from_settings().complete(ask(unanswered))
    assert refused.value.status == 400 and not refused.value.retryable
    assert "without `tool_result` blocks" in str(refused.value)


@pytest.mark.django_db
def test_its_default_policy_drives_a_run_to_completion(no_enqueue, settings):
    # What a person gets from `python -m tests.support.fake_messages_api`: one tool turn, then text.
    with FakeMessagesServer(tool_turns=1) as server:
        settings.ANTHROPIC_API_KEY = API_KEY
        settings.ANTHROPIC_BASE_URL = server.base_url
        agent = get_agent("sql-analyst")
        data, _ = agent.validate_input({"question": "Tables?", "report_to": "a@example.com"})
        run = engine.launch(agent=agent, input=data, provider="anthropic")
        assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    [tool_step] = run.steps.filter(kind=Step.Kind.TOOL)
    assert tool_step.data["tool"] == "list_tables" and not tool_step.data["is_error"]
    run.refresh_from_db()
    assert run.output == "Fake answer after 1 earlier turn(s)."


def test_it_serves_many_clients_at_once(fake_api, settings):
    clients = 30
    # Each answer waits until every request is in: a server that answered one request at a
    # time would never get there (the barrier breaks after its deadline, and the count says
    # how many were in).
    all_in = threading.Barrier(clients)

    def when_all_are_in(body: dict):
        with contextlib.suppress(threading.BrokenBarrierError):
            all_in.wait(timeout=30)
        return reply([text("Done.")])

    fake_api.push(*[when_all_are_in] * clients)
    settings.AGENTOPS = {**settings.AGENTOPS, "LLM_TIMEOUT_SECONDS": 60.0}
    provider = AnthropicProvider.from_settings()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        answers = list(
            pool.map(
                lambda i: provider.complete(ask([{"role": "user", "content": f"#{i}"}])),
                range(clients),
            )
        )
    assert [a.stop_reason for a in answers] == ["end_turn"] * clients
    assert len(fake_api.messages_requests()) == clients
    assert fake_api.max_in_flight == clients, "the requests were not answered concurrently"
    assert fake_api.in_flight == 0


def test_each_worker_thread_keeps_its_own_connection_between_calls(fake_api):
    provider = AnthropicProvider.from_settings()
    clients: dict[str, set[int]] = {}

    def three_calls(name: str) -> None:
        for i in range(3):
            assert provider.complete(ask([{"role": "user", "content": f"{name}{i}"}]))
            clients.setdefault(name, set()).add(id(provider.client))

    threads = [threading.Thread(target=three_calls, args=(name,)) for name in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    # One client per thread (no pool shared by every thread), and it keeps its connection.
    assert [len(ids) for ids in clients.values()] == [1, 1]
    assert clients["a"] != clients["b"]
    assert len(fake_api.messages_requests()) == 6
    assert fake_api.connections_opened == 2


def test_stop_releases_a_hanging_request():
    server = FakeMessagesServer(hang_seconds=600).start()
    server.push(hang())
    outcome: list = []

    def call():
        try:
            post(
                server.base_url,
                {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]},
                {"x-api-key": "k"},
                timeout=600,
            )
        except Exception as exc:  # the connection is closed without an answer
            outcome.append(type(exc).__name__)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    deadline = time.monotonic() + 30
    while not server.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.requests, "the request never reached the server"
    server.stop()
    # Neither the server (hang_seconds) nor the client (its timeout) gives up by itself
    # within this deadline: only stop() can have ended the call.
    caller.join(timeout=30)
    assert not caller.is_alive(), "stop() left the hung request hanging"
    assert outcome, "a hung request must never get an answer"
    assert outcome != ["TimeoutError"], "the client gave up; stop() did not release the call"


def test_it_runs_from_the_command_line(settings):
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.fake_messages_api",
            "--port",
            "0",
            "--latency",
            "0.05",
            "--tool-turns",
            "1",
            "--quiet",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        assert line.startswith("fake Messages API on http://127.0.0.1:"), line
        settings.ANTHROPIC_API_KEY = API_KEY
        settings.ANTHROPIC_BASE_URL = line.split(" on ")[1].strip()
        provider = AnthropicProvider.from_settings()
        offered = [{"name": "list_tables", "description": "d", "input_schema": {"type": "object"}}]
        first = provider.complete(ask([{"role": "user", "content": "hi"}], tools=offered))
        assert first.stop_reason == "tool_use" and first.tool_uses[0]["name"] == "list_tables"
        assert first.latency_ms >= 50
    finally:
        process.terminate()
        process.wait(timeout=5)


def test_a_streamed_request_is_answered_as_server_sent_events_in_the_apis_order(fake_api):
    fake_api.stream_chunk = 5
    fake_api.push(reply([text("Hello there."), tool_use("lookup", table="t")]))
    request = urllib.request.Request(
        fake_api.base_url + "/v1/messages",
        data=json.dumps(
            {
                "model": "m",
                "max_tokens": 1024,
                "stream": True,
                "messages": [{"role": "user", "content": "hi"}],
            }
        ).encode(),
        headers={"content-type": "application/json", "x-api-key": API_KEY},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.headers["content-type"] == "text/event-stream"
        assert response.headers["request-id"].startswith("req_")
        raw = response.read().decode()
    events = [
        (chunk.split("\n")[0].removeprefix("event: "), json.loads(chunk.split("\ndata: ")[1]))
        for chunk in raw.strip().split("\n\n")
    ]
    names = [name for name, _ in events]
    assert names == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * 3,  # "Hello there." in pieces of 5
        "content_block_stop",
        "content_block_start",
        *["content_block_delta"] * 2,  # the tool's input as two pieces of JSON
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(data["type"] == name for name, data in events)
    assert "".join(d["delta"]["text"] for n, d in events[2:5]) == "Hello there."
    assert json.loads("".join(d["delta"]["partial_json"] for n, d in events[7:9])) == {"table": "t"}
    assert (
        events[0][1]["message"]["content"] == [] and events[0][1]["message"]["stop_reason"] is None
    )
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
    assert events[-2][1]["usage"]["output_tokens"] > 1


USER = {"role": "user", "content": "hi"}
CALL = {"type": "tool_use", "id": "toolu_1", "name": "list_tables", "input": {}}
RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}
TOOL = {"name": "list_tables", "description": "d", "input_schema": {"type": "object"}}


@pytest.mark.parametrize(
    "changes,complaint",
    [
        ({"max_tokens": 0}, "max_tokens: Input should be greater than or equal to 1"),
        ({"messages": [{"role": "user", "content": ""}]}, "must have non-empty content"),
        ({"messages": [{"role": "user", "content": []}]}, "must have non-empty content"),
        (
            {"messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}]},
            "text content blocks must be non-empty",
        ),
        (
            {
                "messages": [
                    USER,
                    {"role": "assistant", "content": [CALL]},
                    {"role": "user", "content": [{"type": "text", "text": "note"}, RESULT]},
                ]
            },
            "Did not find 1 `tool_result` block(s) at the beginning of this message",
        ),
        ({"tools": [{**TOOL, "name": "a.b"}]}, "tools.0.custom.name: String should match"),
        ({"tools": [{"name": "t", "description": "d"}]}, "tools.0.custom.input_schema: Field"),
        (
            {"messages": [USER, {"role": "assistant", "content": "The answer is "}]},
            "final assistant content cannot end with trailing whitespace",
        ),
    ],
    ids=[
        "max-tokens-0",
        "empty-string",
        "empty-list",
        "empty-text-block",
        "text-before-tool-result",
        "tool-name-with-a-dot",
        "tool-without-schema",
        "prefill-ending-in-whitespace",
    ],
)
def test_it_refuses_malformed_requests_as_the_real_api_does(fake_api, changes, complaint):
    fake_api.push(reply([text("must not be used")]))
    body = {"model": "claude-haiku-4-5", "max_tokens": 10, "messages": [USER], **changes}
    status, headers, answer = post(fake_api.base_url, body, {"x-api-key": "k"})
    assert status == 400, answer
    # The real error shape: {"type": "error", "error": {type, message}, "request_id"}.
    assert answer["type"] == "error"
    assert answer["error"]["type"] == "invalid_request_error"
    assert complaint in answer["error"]["message"]
    assert answer["request_id"] == headers["request-id"]
    assert fake_api.remaining == 1


def test_what_the_real_api_accepts_it_accepts(fake_api):
    body = {
        "model": "claude-haiku-4-5",
        "max_tokens": 10,
        "tools": [TOOL],
        "messages": [
            USER,
            {"role": "assistant", "content": [CALL]},
            {"role": "user", "content": [RESULT, {"type": "text", "text": "and then?"}]},
            {"role": "assistant", "content": "The answer is"},  # a prefill without trailing space
        ],
    }
    status, _, answer = post(fake_api.base_url, body, {"x-api-key": "k"})
    assert status == 200, answer


def test_it_stops_at_max_tokens_as_the_real_api_does(fake_api):
    long = "Revenue by category: Electronics 41%, Home 23%, Garden 36%. " * 10
    fake_api.push(reply([text(long), tool_use("list_tables")]))
    body = {"model": "claude-haiku-4-5", "max_tokens": 20, "messages": [USER]}
    status, _, answer = post(fake_api.base_url, body, {"x-api-key": "k"})
    assert status == 200
    assert answer["stop_reason"] == "max_tokens"
    assert answer["usage"]["output_tokens"] == 20
    (block,) = answer["content"]  # the call that did not fit is left out
    assert block["type"] == "text" and long.startswith(block["text"])
    assert 0 < len(block["text"]) < len(long)


def test_a_truncated_answer_fails_the_run_through_the_sdk(fake_api, settings, db, no_enqueue):
    """The SQL analyst's run of the issue: cut off every time, it fails visibly instead of
    ending succeeded with "…Electronics 41%, Home 2"."""
    long = "Revenue by category: Electronics 41%, Home 23%, Garden 36%. " * 400
    fake_api.push(*[reply([text(long)])] * 3)
    agent = get_agent("sql-analyst")
    data, errors = agent.validate_input(
        {"question": "Revenue by category?", "report_to": "analytics@example.com"}
    )
    assert not errors
    run = engine.launch(agent=agent, input=data, launched_by=None)
    engine.advance(run.pk, time_slice=30)
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert run.termination_reason == Run.Termination.TRUNCATED
    assert run.output == ""
    sent = [r.body["max_tokens"] for r in fake_api.messages_requests()]
    assert sent == [sent[0], sent[0] * 2, sent[0] * 4]
    stops = [s.data["stop_reason"] for s in run.steps.filter(kind=Step.Kind.LLM)]
    assert stops == ["max_tokens"] * 3
