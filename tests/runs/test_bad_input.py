"""Bad input on the runs pages and API is a clear 4xx, never a 500, and writes nothing.

Each case here was a 500 found by fuzzing (schemathesis on the API, hand-made requests on
the pages) against PostgreSQL; on SQLite some failed differently or not at all, so the
expected answer is asserted on both.
"""

import json

import pytest
from django.test import Client
from django.urls import reverse

from runs.models import Run

from .factories import make_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def as_operator(operator) -> Client:
    client = Client()
    client.force_login(operator)
    return client


# --- pages ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["runs:list", "runs:audit"])
def test_the_last_representable_date_is_a_form_error_not_a_500(as_viewer, name):
    # date_to filters up to the start of the next day, which 9999-12-31 does not have.
    response = as_viewer.get(reverse(name), {"date_to": "9999-12-31"})
    assert response.status_code == 200
    assert "Enter a date before 9999-12-31." in response.content.decode()


@pytest.mark.parametrize(
    "query",
    [
        {"page": "abc"},
        {"page": "-1"},
        {"page": "9" * 40},
        {"date_from": "2020-13-45"},
        {"date_from": "99999-01-01"},
        {"status": "bogus", "agent": "nope", "trigger": "x"},
        {"q": "x" * 5000},
    ],
)
def test_run_list_survives_garbage_filters(as_viewer, query):
    assert as_viewer.get(reverse("runs:list"), query).status_code == 200
    assert as_viewer.get(reverse("runs:audit"), query).status_code == 200


@pytest.mark.parametrize("path", ["/runs/", "/audit/", "/approvals/", "/runs/new/"])
def test_a_nul_character_in_the_query_is_a_400_with_a_message(as_operator, path):
    response = as_operator.get(path, {"agent": "a\x00b"})
    assert response.status_code == 400
    assert "NUL character" in response.content.decode()


def test_a_nul_character_in_a_form_is_a_400_and_launches_nothing(as_operator):
    data = {"agent": "sql-analyst", "question": "Revenue?\x00", "report_to": "a@example.com"}
    response = as_operator.post(reverse("runs:new"), data)
    assert response.status_code == 400
    assert Run.objects.count() == 0


def test_an_unknown_htmx_target_gets_the_whole_page(as_operator, operator, no_enqueue):
    run = make_run(operator)
    for url in (reverse("runs:detail", args=[run.pk]), reverse("runs:list"), "/", "/runs/new/"):
        response = as_operator.get(url, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="no-such-thing")
        assert response.status_code == 200, url
        assert "<!doctype html>" in response.content.decode().lower(), url


def test_older_steps_with_odd_numbers(as_viewer, operator, no_enqueue):
    run = make_run(operator)
    url = reverse("runs:steps", args=[run.pk])
    assert as_viewer.get(url, {"before": "9" * 40}).status_code == 200
    assert as_viewer.get(url, {"before": "-5"}).status_code == 200
    missing = as_viewer.get(url)
    assert missing.status_code == 400 and b"before must be a step number" in missing.content
    assert as_viewer.get(reverse("runs:step", args=[run.pk, 10**20])).status_code == 404


# --- API -----------------------------------------------------------------------------------
def test_api_filters_with_a_nul_character_are_a_400(as_viewer):
    response = as_viewer.get("/api/runs", {"agent": "\x00"})
    assert response.status_code == 400
    assert "NUL" in response.json()["detail"]


def test_api_launch_with_a_nul_character_in_json_is_a_400(as_operator):
    body = json.dumps({"agent": "sql-analyst", "input": {"question": "a\u0000b"}})
    assert "\\u0000" in body
    response = as_operator.post("/api/runs", body, content_type="application/json")
    assert response.status_code == 400
    assert "NUL" in response.json()["detail"]
    assert Run.objects.count() == 0


def test_an_escaped_backslash_before_u0000_is_not_a_nul(as_operator, no_enqueue):
    # The text `\u0000` (backslash, u, zeros) is legitimate; only a decoded NUL is refused.
    body = json.dumps(
        {"agent": "sql-analyst", "input": {"question": "\\u0000?", "report_to": "a@b.co"}}
    )
    response = as_operator.post("/api/runs", body, content_type="application/json")
    assert response.status_code == 201, response.content
    assert Run.objects.get().input["question"] == "\\u0000?"


@pytest.mark.parametrize("path", ["/api/runs", "/api/runs/{run}/checkpoints"])
def test_api_offsets_beyond_the_database_range_are_a_422(as_viewer, operator, no_enqueue, path):
    run = make_run(operator)
    path = path.format(run=run.pk)
    response = as_viewer.get(path, {"offset": str(2**63)})
    assert response.status_code == 422
    assert response.json()["errors"][0]["loc"] == ["query", "offset"]
    # The lists page by cursor; their offset is capped at 10 000 (runs/api.py).
    assert as_viewer.get(path, {"offset": "10000"}).status_code == 200
    assert as_viewer.get(path, {"offset": "10001"}).status_code == 422


def test_api_dates_with_offsets_postgres_refuses_are_converted_to_utc(as_viewer, operator):
    # pydantic accepts offsets up to ±23:59; PostgreSQL only up to ±15:59 (was a 500).
    response = as_viewer.get("/api/runs", {"created_after": "2020-07-20T04:24:16+21:01"})
    assert response.status_code == 200
    # A time with no UTC equivalent is a field error.
    response = as_viewer.get("/api/runs", {"created_after": "0001-01-01T00:00:00+14:00"})
    assert response.status_code == 422
    assert response.json()["errors"][0]["loc"][-1] == "created_after"


def test_api_timeline_with_numbers_beyond_any_seq(as_viewer, operator, no_enqueue):
    run = make_run(operator)
    url = f"/api/runs/{run.pk}/steps"
    response = as_viewer.get(url, {"after": str(2**70)})
    assert response.status_code == 200
    assert response.json()["items"] == []
    response = as_viewer.get(url, {"limit": "9" * 30})
    assert response.status_code == 200
    assert [s["seq"] for s in response.json()["items"]] == list(range(1, run.last_seq + 1))
    assert as_viewer.get(url, {"after": "-1"}).status_code == 422
