"""The runs API (django-ninja): launch, list, detail, timeline, checkpoints, cancel, roles."""

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.contrib.staticfiles import finders
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from accounts.models import ApiToken
from agentkit.agents import CATALOGUE, get_agent
from runs import api_paging, engine
from runs.models import Run, Step
from tests.conftest import make_user

REFUND = {"order_id": 42, "amount": "1.00", "reason": "Arrived damaged"}
SQL = {"question": "Revenue by category?", "report_to": "analytics@example.com"}


def client_for(user, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def bearer_client(user) -> Client:
    _, raw = ApiToken.issue(user, "tests")
    # enforce_csrf_checks: a token request must get through without any CSRF token.
    return Client(enforce_csrf_checks=True, headers={"Authorization": f"Bearer {raw}"})


def post_json(client: Client, path: str, body, **extra):
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.post(path, data=data, content_type="application/json", **extra)


def launch(agent_slug: str, data: dict, user, *, trigger: str = Run.Trigger.API) -> Run:
    agent = get_agent(agent_slug)
    cleaned, errors = agent.validate_input(data)
    assert not errors
    return engine.launch(agent=agent, input=cleaned, trigger=trigger, launched_by=user)


def finish(run: Run, status: str = Run.Status.SUCCEEDED) -> None:
    reason = {
        Run.Status.SUCCEEDED: Run.Termination.COMPLETED,
        Run.Status.FAILED: Run.Termination.MAX_STEPS,
        Run.Status.CANCELLED: Run.Termination.CANCELLED,
    }[status]
    assert run.transition_to(Run.Status.RUNNING)
    assert run.transition_to(status, termination_reason=reason, status_detail="done")


@pytest.fixture
def as_operator(operator) -> Client:
    return client_for(operator)


# --- catalogue ---------------------------------------------------------------------------------
def test_agents_lists_the_catalogue_with_input_schemas_tools_and_limits(as_operator):
    response = as_operator.get("/api/agents")
    assert response.status_code == 200
    agents = {a["slug"]: a for a in response.json()}
    assert set(agents) == set(CATALOGUE)
    refund = agents["refund-desk"]
    assert refund["title"] == "Refund desk" and refund["model"]
    assert refund["input_schema"]["properties"]["order_id"]["type"] == "integer"
    assert "order_id" in refund["input_schema"]["required"]
    assert refund["input_schema"]["additionalProperties"] is False
    tools = {t["name"]: t for t in refund["tools"]}
    assert tools["issue_refund"]["reversible"] is False
    assert tools["issue_refund"]["blast"] in ("high", "critical")
    assert tools["issue_refund"]["accepts_idempotency_key"] is True
    assert tools["lookup_order"]["reversible"] is True
    assert "order_id" in tools["lookup_order"]["input_schema"]["properties"]
    assert refund["limits"]["max_steps"] == 10
    assert Decimal(refund["max_limits"]["max_cost_usd"]) == Decimal("20.00")


# --- launch --------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_launch_creates_a_queued_api_run_with_its_first_step_and_enqueues_it(
    as_operator, operator, no_enqueue, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = post_json(as_operator, "/api/runs", {"agent": "refund-desk", "input": REFUND})
    assert response.status_code == 201, response.content
    body = response.json()
    run = Run.objects.get(pk=body["id"])
    assert no_enqueue == [str(run.pk)]
    assert run.status == Run.Status.QUEUED and body["status"] == "queued"
    assert run.trigger == Run.Trigger.API and body["trigger"] == "api"
    assert run.launched_by == operator and body["launched_by"] == "olivia"
    assert run.input == {"order_id": 42, "amount": "1.00", "reason": "Arrived damaged"}
    assert body["input"] == run.input
    assert body["scripted"] is True and body["provider"] == "scripted"
    assert body["limits"]["max_steps"] == 10
    assert body["pending_approvals"] == 0
    assert body == as_operator.get(f"/api/runs/{run.pk}").json()  # the launch answer is the run
    first = run.steps.get()
    assert first.seq == 1 and first.kind == Step.Kind.STATUS
    assert first.data["event"] == "launched" and first.data["trigger"] == "api"


@pytest.mark.django_db
def test_a_launch_records_which_token_or_session_made_it(operator, no_enqueue):
    response = post_json(
        bearer_client(operator), "/api/runs", {"agent": "sql-analyst", "input": SQL}
    )
    assert response.status_code == 201, response.content
    assert response.json()["source"] == "token tests"
    response = post_json(client_for(operator), "/api/runs", {"agent": "sql-analyst", "input": SQL})
    assert response.json()["source"] == "session"
    assert Run.objects.filter(trigger=Run.Trigger.API).count() == 2


def test_launch_applies_limit_overrides_up_to_the_agents_maximum(as_operator, no_enqueue):
    response = post_json(
        as_operator,
        "/api/runs",
        {
            "agent": "sql-analyst",
            "input": SQL,
            "limits": {"max_steps": 200, "max_cost_usd": "2.5", "max_seconds": 60},
        },
    )
    assert response.status_code == 201, response.content
    run = Run.objects.get(pk=response.json()["id"])
    assert (run.max_steps, run.max_cost_usd, run.max_seconds) == (200, Decimal("2.5"), 60)
    assert run.max_consecutive_errors == get_agent("sql-analyst").limits.max_consecutive_errors
    assert Decimal(response.json()["limits"]["max_cost_usd"]) == Decimal("2.5")


def _loc(response) -> list[list]:
    return [e["loc"] for e in response.json()["errors"]]


BAD_LAUNCHES = [
    pytest.param({"agent": "nope", "input": REFUND}, 422, ["body", "payload", "agent"], id="agent"),
    pytest.param({"input": REFUND}, 422, ["body", "payload", "agent"], id="no-agent"),
    pytest.param({"agent": "refund-desk"}, 422, ["body", "payload", "input"], id="no-input"),
    pytest.param(
        {"agent": "refund-desk", "input": {"amount": "1.00", "reason": "x"}},
        422,
        ["body", "payload", "input", "order_id"],
        id="missing-required",
    ),
    pytest.param(
        {"agent": "refund-desk", "input": {**REFUND, "order_id": 0}},
        422,
        ["body", "payload", "input", "order_id"],
        id="below-minimum",
    ),
    pytest.param(
        {"agent": "refund-desk", "input": {**REFUND, "order_id": "42"}},
        422,
        ["body", "payload", "input", "order_id"],
        id="string-for-integer",
    ),
    pytest.param(
        {"agent": "refund-desk", "input": {**REFUND, "order_id": True}},
        422,
        ["body", "payload", "input", "order_id"],
        id="bool-for-integer",
    ),
    pytest.param(
        {"agent": "refund-desk", "input": {**REFUND, "reason": ["a", "b"]}},
        422,
        ["body", "payload", "input", "reason"],
        id="list-for-string",
    ),
    pytest.param(
        {"agent": "refund-desk", "input": {**REFUND, "amount": "lots"}},
        422,
        ["body", "payload", "input", "amount"],
        id="not-a-number",
    ),
    pytest.param(
        {"agent": "sql-analyst", "input": {**SQL, "report_to": "not an address"}},
        422,
        ["body", "payload", "input", "report_to"],
        id="bad-email",
    ),
    pytest.param(
        {"agent": "refund-desk", "input": {**REFUND, "admin": True}},
        422,
        ["body", "payload", "input"],
        id="unknown-input-field",
    ),
    pytest.param(
        {"agent": "refund-desk", "input": REFUND, "priority": 1},
        422,
        ["body", "payload", "priority"],
        id="unknown-top-field",
    ),
    pytest.param(
        {"agent": "refund-desk", "input": [1, 2]},
        422,
        ["body", "payload", "input"],
        id="input-not-object",
    ),
    pytest.param(
        {"agent": "refund-desk", "input": REFUND, "limits": {"max_steps": 10_000}},
        422,
        ["body", "payload", "limits", "max_steps"],
        id="limit-above-max",
    ),
    pytest.param(
        {"agent": "refund-desk", "input": REFUND, "limits": {"max_cost_usd": "99"}},
        422,
        ["body", "payload", "limits", "max_cost_usd"],
        id="cost-above-max",
    ),
    pytest.param(
        {"agent": "refund-desk", "input": REFUND, "limits": {"max_steps": 0}},
        422,
        ["body", "payload", "limits", "max_steps"],
        id="limit-zero",
    ),
    pytest.param(
        {"agent": "refund-desk", "input": REFUND, "limits": {"max_steps": "ten"}},
        422,
        ["body", "payload", "limits", "max_steps"],
        id="limit-wrong-type",
    ),
    pytest.param(
        {"agent": "refund-desk", "input": REFUND, "limits": {"max_tokens": 5}},
        422,
        ["body", "payload", "limits", "max_tokens"],
        id="unknown-limit",
    ),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("body", "status", "loc"), BAD_LAUNCHES)
def test_bad_launches_are_refused_with_field_errors_and_create_nothing(
    as_operator, no_enqueue, body, status, loc
):
    response = post_json(as_operator, "/api/runs", body)
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json"
    assert loc in _loc(response), response.json()
    assert all(e["msg"] for e in response.json()["errors"])
    assert Run.objects.count() == 0 and Step.objects.count() == 0
    assert no_enqueue == []


@pytest.mark.django_db
def test_unknown_agent_message_names_the_known_agents(as_operator):
    response = post_json(as_operator, "/api/runs", {"agent": "nope", "input": {}})
    assert response.status_code == 422
    message = response.json()["errors"][0]["msg"]
    assert "unknown agent 'nope'" in message and "refund-desk" in message


@pytest.mark.django_db
def test_malformed_json_is_a_400_and_creates_nothing(as_operator):
    response = post_json(as_operator, "/api/runs", b'{"agent": "refund-desk", "input": ')
    assert response.status_code == 400
    assert "detail" in response.json()
    assert Run.objects.count() == 0


@pytest.mark.django_db
def test_oversized_input_is_refused_with_413_and_creates_nothing(as_operator, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "MAX_INPUT_BYTES": 2_000}
    # Small enough for the raw body cap (limit + slack), too large for the input limit.
    reason = "x" * 3_000
    response = post_json(
        as_operator, "/api/runs", {"agent": "refund-desk", "input": {**REFUND, "reason": reason}}
    )
    assert response.status_code == 413
    assert "limit is 2000" in response.json()["detail"]
    assert Run.objects.count() == 0


@pytest.mark.django_db
def test_a_huge_raw_body_is_refused_before_it_is_parsed(as_operator, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "MAX_INPUT_BYTES": 2_000}
    body = json.dumps({"agent": "refund-desk", "input": REFUND, "pad": "y" * 50_000})
    response = post_json(as_operator, "/api/runs", body)
    assert response.status_code == 413
    assert "request body larger than" in response.json()["detail"]
    assert Run.objects.count() == 0


@pytest.mark.django_db
def test_a_garbled_content_length_is_400_not_500(as_operator):
    body = json.dumps({"agent": "refund-desk", "input": REFUND})
    response = post_json(as_operator, "/api/runs", body, CONTENT_LENGTH="many")
    assert response.status_code == 400
    assert Run.objects.count() == 0


@pytest.mark.django_db
def test_a_body_beyond_djangos_upload_limit_is_413_not_500(as_operator, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1_000
    settings.AGENTOPS = {**settings.AGENTOPS, "MAX_INPUT_BYTES": 64_000}
    body = {"agent": "refund-desk", "input": {**REFUND, "reason": "z" * 400}}
    response = post_json(as_operator, "/api/runs", {**body, "pad": "p" * 2_000})
    assert response.status_code == 413
    assert Run.objects.count() == 0


# --- list ---------------------------------------------------------------------------------------
@pytest.fixture
def some_runs(operator, admin_user, no_enqueue):
    """Five runs across agents, triggers, launchers, statuses and days."""
    now = datetime(2026, 11, 20, 12, tzinfo=UTC)
    a = launch("refund-desk", REFUND, operator)
    b = launch("refund-desk", REFUND, admin_user, trigger=Run.Trigger.FORM)
    c = launch("sql-analyst", SQL, operator, trigger=Run.Trigger.SCHEDULE)
    d = launch("sql-analyst", SQL, admin_user)
    e = launch("refund-desk", REFUND, operator, trigger=Run.Trigger.FORM)
    finish(b, Run.Status.SUCCEEDED)
    finish(c, Run.Status.FAILED)
    finish(d, Run.Status.CANCELLED)
    for days, run in zip((4, 3, 2, 1, 0), (a, b, c, d, e), strict=True):
        Run.objects.filter(pk=run.pk).update(created_at=now - timedelta(days=days))
    return {"a": a, "b": b, "c": c, "d": d, "e": e}


def _ids(response, runs: dict) -> list[str]:
    assert response.status_code == 200, response.content
    by_id = {str(r.pk): name for name, r in runs.items()}
    return [by_id[item["id"]] for item in response.json()["items"]]


@pytest.mark.django_db
def test_list_is_newest_first_and_paginated_with_items_and_count(as_operator, some_runs):
    response = as_operator.get("/api/runs")
    assert _ids(response, some_runs) == ["e", "d", "c", "b", "a"]
    assert response.json()["count"] == 5
    page = as_operator.get("/api/runs?limit=2&offset=2")
    assert _ids(page, some_runs) == ["c", "b"]
    assert page.json()["count"] == 5
    assert _ids(as_operator.get("/api/runs?limit=2&offset=4"), some_runs) == ["a"]
    item = page.json()["items"][0]
    assert item["agent"] == "sql-analyst" and item["agent_title"] == "SQL analyst"
    assert item["status"] == "failed" and item["termination_reason"] == "max_steps"
    assert item["termination_label"] == "max steps reached"
    assert item["launched_by"] == "olivia" and item["trigger"] == "schedule"
    assert "input" not in item  # the list is a summary; the detail has the payload


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("status=queued", ["e", "a"]),
        ("status=succeeded", ["b"]),
        ("status=cancelled", ["d"]),
        ("agent=sql-analyst", ["d", "c"]),
        ("agent=no-such-agent", []),
        ("trigger=form", ["e", "b"]),
        ("trigger=schedule", ["c"]),
        ("launched_by=ada", ["d", "b"]),
        ("launched_by=olivia", ["e", "c", "a"]),
        ("created_after=2026-11-18T00:00:00Z", ["e", "d", "c"]),
        ("created_before=2026-11-18", ["b", "a"]),
        ("created_after=2026-11-17&created_before=2026-11-19T12:00:00Z", ["c", "b"]),
        ("created_after=2026-11-19T13:00:00%2B01:00", ["e", "d"]),
        ("agent=refund-desk&trigger=form&launched_by=olivia", ["e"]),
    ],
)
def test_list_filters(as_operator, some_runs, query, expected):
    response = as_operator.get(f"/api/runs?{query}")
    assert _ids(response, some_runs) == expected
    assert response.json()["count"] == len(expected)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "query",
    [
        "status=nope",
        "trigger=carrier-pigeon",
        "created_after=yesterday",
        "created_before=2026-13-45",
        "limit=0",
        "limit=ten",
        "offset=-1",
    ],
)
def test_invalid_list_filters_are_422_not_500(as_operator, some_runs, query):
    response = as_operator.get(f"/api/runs?{query}")
    assert response.status_code == 422, response.content
    assert response.json()["errors"][0]["loc"][0] == "query"


@pytest.mark.django_db
def test_list_query_count_does_not_grow_with_rows(
    operator, admin_user, viewer, no_enqueue, django_assert_max_num_queries
):
    client = client_for(viewer)

    def queries_for_list() -> int:
        with CaptureQueriesContext(connection) as ctx:
            response = client.get("/api/runs?limit=100")
        assert response.status_code == 200
        return len(ctx.captured_queries)

    for user in (operator, admin_user):
        launch("refund-desk", REFUND, user)
    few = queries_for_list()
    for i in range(30):
        launch("sql-analyst", SQL, operator if i % 2 else admin_user)
    # A snapshot without a title (an older agent config) must not load the deferred snapshot.
    Run.objects.filter(agent="sql-analyst").update(agent_config={"slug": "sql-analyst"})
    many = queries_for_list()
    assert many == few, (few, many)
    # session + user + roles + teams, then COUNT and one page with launched_by joined in
    with django_assert_max_num_queries(6):
        response = client.get("/api/runs?limit=100")
    assert response.json()["count"] == 32 and len(response.json()["items"]) == 32


@pytest.mark.django_db
def test_list_page_size_is_capped(as_operator, operator, no_enqueue):
    for _ in range(3):
        launch("refund-desk", REFUND, operator)
    response = as_operator.get("/api/runs?limit=100000")
    assert response.status_code == 200 and response.json()["count"] == 3


# --- detail, steps, checkpoints, cancel: one run driven by the real engine ----------------------
@pytest.mark.django_db
def test_a_run_launched_over_the_api_can_be_read_step_by_step_and_cancelled(
    as_operator, no_enqueue
):
    response = post_json(as_operator, "/api/runs", {"agent": "refund-desk", "input": REFUND})
    assert response.status_code == 201
    run_id = response.json()["id"]
    # The scripted refund desk runs until its irreversible refund is gated.
    assert engine.advance(run_id, time_slice=30) == Run.Status.WAITING
    run = Run.objects.get(pk=run_id)

    detail = as_operator.get(f"/api/runs/{run_id}").json()
    assert detail["status"] == "waiting" and detail["pending_approvals"] == 1
    assert detail["counters"]["steps"] == run.step_count >= 2
    assert detail["counters"]["last_seq"] == run.last_seq
    assert detail["usage"]["tokens_in"] == run.tokens_in
    assert Decimal(detail["usage"]["cost_usd"]) == run.cost_usd
    assert detail["started_at"] and detail["finished_at"] is None
    assert detail["input"] == run.input and detail["output"] == ""

    everything = as_operator.get(f"/api/runs/{run_id}/steps").json()
    seqs = [s["seq"] for s in everything["items"]]
    assert seqs == list(range(1, run.last_seq + 1))
    assert everything["has_more"] is False and everything["last_seq"] == run.last_seq
    kinds = [s["kind"] for s in everything["items"]]
    assert kinds[0] == "status" and "llm" in kinds and "tool" in kinds and "gate" in kinds
    for prev, step in zip(everything["items"], everything["items"][1:], strict=False):
        assert step["prev_hash"] == prev["hash"]
    llm = next(s for s in everything["items"] if s["kind"] == "llm")
    assert {"cost_usd", "tokens_in", "tokens_out", "latency_ms", "created_at"} <= set(llm)

    page = as_operator.get(f"/api/runs/{run_id}/steps?after=2&limit=2").json()
    assert [s["seq"] for s in page["items"]] == [3, 4]
    assert page["has_more"] is True
    tail = as_operator.get(f"/api/runs/{run_id}/steps?after={run.last_seq - 1}").json()
    assert [s["seq"] for s in tail["items"]] == [run.last_seq] and tail["has_more"] is False
    assert as_operator.get(f"/api/runs/{run_id}/steps?after={run.last_seq}").json()["items"] == []

    checkpoints = as_operator.get(f"/api/runs/{run_id}/checkpoints").json()
    expected = list(run.checkpoints.order_by("seq").values_list("seq", flat=True))
    assert [c["seq"] for c in checkpoints["items"]] == expected and checkpoints["count"] >= 2

    cancelled = post_json(as_operator, f"/api/runs/{run_id}/cancel", {"reason": "wrong order"})
    assert cancelled.status_code == 200, cancelled.content
    assert cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["termination_reason"] == "cancelled"
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    last = run.steps.order_by("-seq").first()
    assert last.data["to"] == "cancelled" and last.data["by"] == "olivia"
    assert last.data["detail"] == "wrong order"
    assert run.verify_chain() == (True, None)

    again = as_operator.generic("POST", f"/api/runs/{run_id}/cancel")
    assert again.status_code == 409
    assert "already finished" in again.json()["detail"]
    assert run.steps.count() == run.last_seq  # the refused cancel appended nothing


@pytest.mark.django_db
def test_cancel_without_a_body_cancels_a_queued_run(as_operator, operator, no_enqueue):
    run = launch("sql-analyst", SQL, operator)
    response = as_operator.generic("POST", f"/api/runs/{run.pk}/cancel")
    assert response.status_code == 200, response.content
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED and response.json()["finished_at"]


@pytest.mark.django_db
def test_cancelling_a_finished_run_is_409_and_changes_nothing(as_operator, operator, no_enqueue):
    run = launch("sql-analyst", SQL, operator)
    finish(run, Run.Status.SUCCEEDED)
    version = Run.objects.get(pk=run.pk).version
    response = as_operator.generic("POST", f"/api/runs/{run.pk}/cancel")
    assert response.status_code == 409
    assert "succeeded" in response.json()["detail"]
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED and run.version == version


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path",
    [
        "/api/runs/{id}",
        "/api/runs/{id}/steps",
        "/api/runs/{id}/checkpoints",
    ],
)
def test_unknown_run_is_a_json_404(as_operator, path):
    response = as_operator.get(path.format(id="00000000-0000-0000-0000-000000000000"))
    assert response.status_code == 404
    assert "not found" in response.json()["detail"]


@pytest.mark.django_db
def test_cancel_of_unknown_run_is_a_json_404(as_operator):
    response = as_operator.generic("POST", "/api/runs/00000000-0000-0000-0000-000000000000/cancel")
    assert response.status_code == 404 and response.json()["detail"]


@pytest.mark.django_db
def test_a_malformed_run_id_is_a_4xx_not_500(as_operator):
    response = as_operator.get("/api/runs/not-a-uuid")
    assert response.status_code in (404, 422)


@pytest.mark.django_db
@pytest.mark.parametrize("query", ["after=-1", "limit=0", "after=x"])
def test_invalid_step_paging_is_422(as_operator, operator, no_enqueue, query):
    run = launch("sql-analyst", SQL, operator)
    response = as_operator.get(f"/api/runs/{run.pk}/steps?{query}")
    assert response.status_code == 422


# --- roles and authentication --------------------------------------------------------------------
@pytest.mark.django_db
def test_no_credentials_is_401_for_reads_and_writes(operator, no_enqueue):
    run = launch("sql-analyst", SQL, operator)
    anonymous = Client(enforce_csrf_checks=True)
    for response in (
        anonymous.get("/api/agents"),
        anonymous.get("/api/runs"),
        anonymous.get(f"/api/runs/{run.pk}"),
        post_json(anonymous, "/api/runs", {"agent": "refund-desk", "input": REFUND}),
        anonymous.generic("POST", f"/api/runs/{run.pk}/cancel"),
    ):
        assert response.status_code == 401, response.content
        assert response["WWW-Authenticate"].startswith("Bearer")
        assert response.json()["detail"]
    assert Run.objects.count() == 1
    assert Run.objects.get().status == Run.Status.QUEUED


@pytest.mark.django_db
def test_a_wrong_bearer_token_is_401(operator):
    client = Client(headers={"Authorization": "Bearer ao_not-a-real-token"})
    assert client.get("/api/runs").status_code == 401


@pytest.mark.django_db
def test_a_viewer_can_read_but_not_launch_or_cancel(viewer, operator, no_enqueue):
    run = launch("sql-analyst", SQL, operator)
    client = client_for(viewer)
    assert client.get("/api/agents").status_code == 200
    assert client.get("/api/runs").json()["count"] == 1
    assert client.get(f"/api/runs/{run.pk}").status_code == 200
    assert client.get(f"/api/runs/{run.pk}/steps").status_code == 200
    launched = post_json(client, "/api/runs", {"agent": "refund-desk", "input": REFUND})
    assert launched.status_code == 403
    assert "operator" in launched.json()["detail"]
    cancelled = client.generic("POST", f"/api/runs/{run.pk}/cancel")
    assert cancelled.status_code == 403
    assert Run.objects.count() == 1 and Run.objects.get().status == Run.Status.QUEUED


@pytest.mark.django_db
@pytest.mark.parametrize("body", [{"agent": "nope"}, "not json at all", {"input": [1]}])
def test_a_viewer_is_refused_before_the_body_is_looked_at(viewer, body):
    for client in (client_for(viewer), bearer_client(viewer)):
        response = post_json(client, "/api/runs", body)
        assert response.status_code == 403, response.content
        assert response.json()["detail"] == "your account lacks the operator role"
    assert Run.objects.count() == 0


@pytest.mark.django_db
def test_an_approver_without_the_operator_role_cannot_launch(approver, no_enqueue):
    response = post_json(
        client_for(approver), "/api/runs", {"agent": "refund-desk", "input": REFUND}
    )
    assert response.status_code == 403 and Run.objects.count() == 0


@pytest.mark.django_db
def test_a_user_without_any_role_cannot_read(django_user_model, operator, no_enqueue):
    run = launch("sql-analyst", SQL, operator)
    nobody = make_user(django_user_model, "nobody")
    client = client_for(nobody)
    assert client.get("/api/runs").status_code == 403
    assert client.get(f"/api/runs/{run.pk}").status_code == 403
    assert client.get("/api/agents").status_code == 403


@pytest.mark.django_db
def test_an_admin_can_launch_and_cancel(admin_user, no_enqueue):
    client = client_for(admin_user)
    response = post_json(client, "/api/runs", {"agent": "refund-desk", "input": REFUND})
    assert response.status_code == 201
    assert client.generic("POST", f"/api/runs/{response.json()['id']}/cancel").status_code == 200


@pytest.mark.django_db
def test_a_bearer_token_launches_without_csrf(operator, no_enqueue):
    client = bearer_client(operator)
    response = post_json(client, "/api/runs", {"agent": "refund-desk", "input": REFUND})
    assert response.status_code == 201, response.content
    run = Run.objects.get()
    assert run.launched_by == operator
    assert client.generic("POST", f"/api/runs/{run.pk}/cancel").status_code == 200
    assert ApiToken.objects.get().last_used_at is not None


@pytest.mark.django_db
def test_a_viewers_bearer_token_cannot_launch(viewer, no_enqueue):
    response = post_json(
        bearer_client(viewer), "/api/runs", {"agent": "refund-desk", "input": REFUND}
    )
    assert response.status_code == 403 and Run.objects.count() == 0


@pytest.mark.django_db
def test_a_session_post_without_the_csrf_token_is_refused(operator, no_enqueue):
    client = client_for(operator, csrf=True)
    assert client.get("/api/runs").status_code == 200  # reads need no token
    response = post_json(client, "/api/runs", {"agent": "refund-desk", "input": REFUND})
    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]
    assert Run.objects.count() == 0

    run = launch("sql-analyst", SQL, operator)
    assert client.generic("POST", f"/api/runs/{run.pk}/cancel").status_code == 403
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED


@pytest.mark.django_db
def test_a_session_post_with_the_csrf_token_is_accepted(operator, no_enqueue):
    client = client_for(operator, csrf=True)
    client.get("/accounts/login/")  # sets the csrftoken cookie like a browser page would
    token = client.cookies["csrftoken"].value
    response = post_json(
        client,
        "/api/runs",
        {"agent": "refund-desk", "input": REFUND},
        headers={"X-CSRFToken": token},
    )
    assert response.status_code == 201, response.content


# --- OpenAPI ------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_openapi_docs_load_and_describe_the_runs_api(client):
    docs = client.get("/api/docs")
    assert docs.status_code == 200
    page = docs.content.decode()
    # Vendored Swagger UI, served by us: no CDN, no inline script (the CSP forbids both).
    assert "cdn." not in page and "<script>" not in page
    for asset in ("ninja/swagger-ui-bundle.js", "ninja/swagger-ui-init.js", "ninja/swagger-ui.css"):
        assert f"/static/{asset}" in page
        assert finders.find(asset), asset
    assert "/api/openapi.json" in page
    schema = client.get("/api/openapi.json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    for path in (
        "/api/agents",
        "/api/runs",
        "/api/runs/{run_id}",
        "/api/runs/{run_id}/steps",
        "/api/runs/{run_id}/checkpoints",
        "/api/runs/{run_id}/cancel",
    ):
        assert path in paths, sorted(paths)
    assert "201" in paths["/api/runs"]["post"]["responses"]
    params = {p["name"] for p in paths["/api/runs"]["get"]["parameters"]}
    filters = {"status", "agent", "trigger", "launched_by", "created_after", "created_before"}
    assert filters <= params
    assert {"limit", "offset"} <= params


@pytest.mark.django_db
def test_a_cursor_walks_the_whole_list_a_page_at_a_time(as_operator, some_runs):
    seen, cursor = [], None
    while True:
        query = "/api/runs?limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = as_operator.get(query)
        seen += _ids(page, some_runs)
        assert page.json()["count"] == 5 and page.json()["count_capped"] is False
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
    assert seen == ["e", "d", "c", "b", "a"]


@pytest.mark.django_db
def test_the_count_stops_at_its_cap(as_operator, some_runs, monkeypatch):
    monkeypatch.setattr(api_paging, "COUNT_CAP", 3)
    body = as_operator.get("/api/runs?limit=1").json()
    assert body["count"] == 3 and body["count_capped"] is True


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "field"),
    [("offset=10001", "offset"), ("cursor=bm9wZQ", "cursor"), ("cursor=%25%25", "cursor")],
)
def test_a_deep_offset_or_a_forged_cursor_is_422(as_operator, some_runs, query, field):
    response = as_operator.get(f"/api/runs?{query}")
    assert response.status_code == 422, response.content
    assert response.json()["errors"][0]["loc"] == ["query", field]
