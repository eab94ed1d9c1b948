"""A request's trace from daphne to the tool, as an integrator's collector receives it:
`manage.py up` in a subprocess (daphne, and the embedded Celery worker in the same process,
on the in-memory transport) with OpenTelemetry exporting over OTLP/HTTP to a receiver in this
test. A launch with an incoming `traceparent`: daphne's server span joins the caller's trace,
the run's steps and their tool calls (made in the worker) are its children, and an approver's
decision closes the gate's wait, a span of the run recorded from the approval's creation."""

import json
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.livesupport import kill_up, opener, start_up, stop_up

pytestmark = pytest.mark.timeout(600)  # a process to start, a run to finish, on a busy machine

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
SQL = {"question": "Revenue by category?", "report_to": "boss@example.com"}


class Receiver(ThreadingHTTPServer):
    """A collector's OTLP/HTTP traces endpoint (protobuf), keeping every span it is sent."""

    def __init__(self) -> None:
        self.spans: list[dict] = []
        super().__init__(("127.0.0.1", 0), _Export)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Export(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                self.server.spans.extend(_span(s) for s in scope.spans)
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args) -> None:
        pass


def _span(span) -> dict:
    attributes = {}
    for kv in span.attributes:
        kind = kv.value.WhichOneof("value")
        value = getattr(kv.value, kind)
        if kind == "array_value":
            value = [getattr(v, v.WhichOneof("value")) for v in value.values]
        attributes[kv.key] = value
    return {
        "name": span.name,
        "trace": span.trace_id.hex(),
        "id": span.span_id.hex(),
        "parent": span.parent_span_id.hex(),
        "kind": span.kind,  # 2: server
        "start": span.start_time_unix_nano,
        "end": span.end_time_unix_nano,
        "attributes": attributes,
    }


@pytest.fixture
def receiver():
    server = Receiver()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def _call(server, method: str, path: str, token: str, body=None, **headers) -> dict:
    request = urllib.request.Request(
        server.url + path,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json", **headers},
    )
    with opener().open(request, timeout=60) as response:
        return json.loads(response.read())


def _said(server, code: str) -> list[str]:
    """What `code` printed after "said" (`manage.py shell` prints lines of its own)."""
    out = server.manage(code).splitlines()
    return [line.split(" ", 1)[1] for line in out if line.startswith("said ")]


def _is_launch(attributes: dict) -> bool:
    method = attributes.get("http.request.method", attributes.get("http.method"))
    return method == "POST" and attributes.get("http.route", "").endswith("runs")


def _until(what: str, found, seconds: float = 120):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = found()
        if value:
            return value
        time.sleep(0.3)
    pytest.fail(f"no {what} within {seconds} s")


def test_a_launch_through_daphne_is_one_trace_down_to_the_tools(tmp_path, receiver):
    server = start_up(
        tmp_path,
        AGENTOPS_OTEL="true",
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
        OTEL_BSP_SCHEDULE_DELAY="100",
        LOG_FORMAT="json",
    )
    try:
        tokens = _said(
            server,
            "from accounts.models import ApiToken, User\n"
            "for name in ('operator', 'approver'):\n"
            "    print('said', ApiToken.issue(User.objects.get(username=name), 'trace test')[1])\n",
        )
        run = _call(
            server,
            "POST",
            "/api/runs",
            tokens[0],
            {"agent": "sql-analyst", "input": SQL},
            traceparent=TRACEPARENT,
        )
        _until(
            "gate",
            lambda: (
                _call(server, "GET", f"/api/runs/{run['id']}", tokens[0])["status"] == "waiting"
            ),
        )
        (approval,) = _said(
            server,
            "from approvals.models import Approval\n"
            f"print('said', Approval.objects.get(run_id='{run['id']}').pk)\n",
        )
        _call(
            server,
            "POST",
            f"/api/approvals/{approval}/decision",
            tokens[1],
            {"decision": "approve"},
        )
        _until(
            "end",
            lambda: (
                _call(server, "GET", f"/api/runs/{run['id']}", tokens[0])["status"] == "succeeded"
            ),
        )
        (stored,) = _said(
            server,
            "from runs.models import Run\n"
            f"print('said', Run.objects.get(pk='{run['id']}').traceparent)",
        )
        run_span = stored.split(";")[0].split("-")[2]
        _until(
            "run span",
            lambda: any(s["name"] == "invoke_agent sql-analyst" for s in receiver.spans),
        )
    finally:
        stop_up(server)
        kill_up(server)

    spans = receiver.spans
    by_id = {s["id"]: s for s in spans}
    # daphne's server span for the launch: the caller's trace, the caller's span its parent.
    (launch,) = [s for s in spans if s["kind"] == 2 and _is_launch(s["attributes"])]
    assert (launch["trace"], launch["parent"]) == (CALLER_TRACE, CALLER_SPAN)
    # The run's span is the launch request's child, in the same trace.
    (invoke,) = [s for s in spans if s["name"] == "invoke_agent sql-analyst"]
    assert (invoke["id"], invoke["trace"], invoke["parent"]) == (
        run_span,
        CALLER_TRACE,
        launch["id"],
    )
    # The worker's task and every step are in it; each step is the run span's child.
    assert any(
        s["name"] == "run/runs.tasks.advance_run" and s["trace"] == CALLER_TRACE for s in spans
    )
    steps = [s for s in spans if s["name"] == "agentops.step"]
    assert steps and all(s["parent"] == run_span and s["trace"] == CALLER_TRACE for s in steps)
    # Each tool call (made on the worker's tool threads) is a step's child.
    tools = [s for s in spans if s["name"].startswith("execute_tool ")]
    assert {"run_query", "email_report"} <= {t["attributes"]["gen_ai.tool.name"] for t in tools}
    for tool in tools:
        assert tool["trace"] == CALLER_TRACE and by_id[tool["parent"]]["name"] == "agentops.step"
    chats = [s for s in spans if s["name"].startswith("chat ")]
    assert chats and all(by_id[c["parent"]]["name"] == "agentops.step" for c in chats)
    assert all(c["attributes"]["gen_ai.response.id"].startswith("msg_") for c in chats)
    assert all("gen_ai.usage.cache_read.input_tokens" in c["attributes"] for c in chats)
    # The gate's wait for a person: a span of the run, from the gate to the decision,
    # ending before the approved call began.
    (wait,) = [s for s in spans if s["name"] == "approval action"]
    assert (wait["trace"], wait["parent"]) == (CALLER_TRACE, run_span)
    assert wait["attributes"]["agentops.approval.decided_by"] == "approver"
    (emailed,) = [t for t in tools if t["attributes"]["gen_ai.tool.name"] == "email_report"]
    assert wait["start"] < wait["end"] <= emailed["start"]

    # The access line of the launch: its request id, user and the trace id, as JSON; and,
    # LOG_FORMAT=json, every line `up` wrote (daphne and the worker in one process) is JSON.
    records = [json.loads(line) for line in server.lines if line.strip()]
    (access,) = [
        r for r in records if r.get("logger") == "agentops.access" and r["path"] == "/api/runs"
    ]
    assert access["user"] == "operator" and access["trace_id"] == CALLER_TRACE
    assert access["status"] == 201 and len(access["request_id"]) == 32
