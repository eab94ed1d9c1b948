"""API endpoints that take no body refuse one (agentops/bodies.py): 413 with a message, answered
before the body is read, at the real ASGI application."""

import json

import pytest
from channels.testing import ApplicationCommunicator

from agentops import bodies
from agentops.api import api
from agentops.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)

RUN = "7d9b6f1e-4c1b-4f4e-9a55-0c1de0b0a001"
TEN_MB = 10 * 1024 * 1024

# The endpoints the issue names, and every other one ninja says takes no body.
NAMED = [
    f"/api/runs/{RUN}/pause",
    f"/api/runs/{RUN}/resume",
    f"/api/runs/{RUN}/replay",
    f"/api/approvals/{RUN}/open",
]


def _scope(method: str, path: str, headers: list[tuple[bytes, bytes]]) -> dict:
    return {
        "type": "http",
        "http_version": "1.1",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "scheme": "https",
        "server": ("testserver", 443),
        "client": ("127.0.0.1", 40000),
        "headers": [(b"host", b"testserver"), *headers],
    }


async def _first_chunk_answer(method: str, path: str, headers) -> dict:
    """Send the headers and the first 64 KiB of a 10 MB body, nothing more, and wait for the
    answer: an endpoint that read the body first would never answer."""
    app = ApplicationCommunicator(application, _scope(method, path, headers))
    await app.send_input({"type": "http.request", "body": b"x" * 65536, "more_body": True})
    start = await app.receive_output(timeout=10)
    body = await app.receive_output(timeout=10)
    await app.wait(timeout=10)
    return {"status": start["status"], "body": json.loads(body["body"])}


@pytest.mark.parametrize("path", NAMED)
async def test_a_body_sent_where_none_is_taken_is_refused_unread(path):
    answer = await _first_chunk_answer("POST", path, [(b"content-length", str(TEN_MB).encode())])
    assert answer["status"] == 413
    assert "takes no request body" in answer["body"]["detail"]


async def test_a_chunked_body_is_refused_too():
    answer = await _first_chunk_answer(
        "POST", f"/api/runs/{RUN}/pause", [(b"transfer-encoding", b"chunked")]
    )
    assert answer["status"] == 413


def _bodyless_operations() -> list[tuple[str, str]]:
    out = []
    for prefix, router in api._routers:
        for route, view in router.path_operations.items():
            for operation in view.operations:
                for method in set(operation.methods) & bodies.UNSAFE:
                    takes = (operation.openapi_extra or {}).get("requestBody") or any(
                        getattr(m, "__ninja_param_source__", None) in bodies.BODY_SOURCES
                        for m in operation.models
                    )
                    if not takes:
                        out.append((method, f"/api{prefix.rstrip('/')}{route}"))
    return out


def _concrete(route: str) -> str:
    """A route's parameters filled with values its converters accept."""
    import re

    return re.sub(r"\{(?:(\w+):)?(\w+)\}", lambda m: "7" if m[1] == "int" else RUN, route)


def test_every_endpoint_without_a_body_refuses_one():
    operations = _bodyless_operations()
    # The named ones are among them, and so are the others (schedules, grants, budgets...).
    paths = {path for _, path in operations}
    assert {"/api/runs/{run_id}/pause", "/api/runs/{run_id}/replay"} <= paths
    assert len(operations) >= 8
    for method, route in operations:
        scope = _scope(method, _concrete(route), [(b"content-length", b"10")])
        assert bodies.refusal(scope) is not None, (method, route)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/api/runs"),  # a launch: its body is its input
        ("POST", "/api/hooks/refund-desk"),  # a webhook reads its raw body
        ("POST", "/api/imports"),  # so does an import
        ("POST", "/api/pending/some-token"),  # and a pending operation's callback
        ("POST", f"/api/approvals/{RUN}/decision"),
        ("POST", "/accounts/login/"),  # not the API: Django's forms and limits
    ],
)
def test_endpoints_that_take_a_body_are_left_alone(method, path):
    assert bodies.refusal(_scope(method, path, [(b"content-length", b"10")])) is None


def test_no_body_or_an_empty_one_goes_through():
    path = f"/api/runs/{RUN}/pause"
    assert bodies.refusal(_scope("POST", path, [])) is None
    assert bodies.refusal(_scope("POST", path, [(b"content-length", b"0")])) is None
