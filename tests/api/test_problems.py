"""Every error under /api/ is RFC 9457 problem details (agentops/problems.py), whoever answered
it: a view, ninja's validation, Django's 404, a 405; the OpenAPI document says so."""

import pytest
from django.test import Client

from agentops.api import api
from tests.runs.test_api import REFUND, bearer_client, post_json

pytestmark = pytest.mark.django_db

PROBLEM = "application/problem+json"


def problem(response, status: int, kind: str) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == PROBLEM
    body = response.json()
    assert body["type"] == f"urn:agentops:problem:{kind}"
    assert body["status"] == status and body["title"] and isinstance(body["detail"], str)
    return body


def test_an_unknown_api_path_is_a_problem_not_a_page(operator):
    body = problem(bearer_client(operator).get("/api/no-such-thing"), 404, "not-found")
    assert "/api/no-such-thing" in body["detail"]


def test_a_wrong_method_is_405_with_its_allow_header(operator):
    response = bearer_client(operator).delete("/api/runs")
    problem(response, 405, "method-not-allowed")
    assert "GET" in response["Allow"]


def test_without_a_user_the_challenge_header_stays():
    response = Client().get("/api/runs")
    problem(response, 401, "unauthenticated")
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_field_errors_are_listed_and_said_in_words(operator):
    client = bearer_client(operator)
    body = problem(post_json(client, "/api/runs", {"agent": "refund-desk"}), 422, "invalid-input")
    assert [e["loc"][-1] for e in body["errors"]] == ["input"]
    assert body["detail"].startswith("invalid input: ") and "input" in body["detail"]


def test_a_views_own_refusal_keeps_its_words(operator):
    client = bearer_client(operator)
    body = problem(
        post_json(client, "/api/runs", {"agent": "nope", "input": REFUND}), 422, "invalid-input"
    )
    assert "nope" in body["detail"] or any("nope" in str(e) for e in body["errors"])
    missing = problem(
        client.get("/api/runs/00000000-0000-0000-0000-000000000000"), 404, "not-found"
    )
    assert "00000000-0000-0000-0000-000000000000" in missing["detail"]


def test_pages_outside_the_api_keep_their_html(operator):
    client = Client()
    client.force_login(operator)
    response = client.get("/runs/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


def test_every_operation_documents_its_errors_as_problems():
    schema = api.get_openapi_schema()
    assert set(schema["components"]["schemas"]["Problem"]["required"]) >= {"type", "detail"}
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            errors = {c: r for c, r in operation["responses"].items() if str(c)[0] in "45"}
            assert {"4XX", "5XX"} <= set(errors), (method, path)
            for code, response in errors.items():
                assert PROBLEM in response["content"], (method, path, code)
