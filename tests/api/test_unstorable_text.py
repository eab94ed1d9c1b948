"""A lone UTF-16 surrogate (`"a\\ud800b"`) in JSON is a clear 400 on every JSON endpoint,
never a 500, and nothing is written: one check in the request middleware
(agentops/middleware.py, agentkit/storable.py) covers them all.

Each endpoint is called as a caller allowed to use it (a session, an agent's token, a signed
webhook), so the request would reach the view without the check.
"""

import json
import uuid
from decimal import Decimal

import pytest
from django.apps import apps
from django.test import Client

from agentkit import storable
from agentops.api import api
from runs.models import Budget
from tests.gateway.conftest import AgentClient, make_agent
from tests.triggers.conftest import post_hook
from triggers.models import WebhookSecret

pytestmark = pytest.mark.django_db

LONE = "a\ud800b"
# The field names the endpoints read, each holding the surrogate somewhere.
BODY = {
    "agent": "sql-analyst",
    "input": {"question": LONE, "report_to": "a@example.com"},
    "session": LONE,
    "metadata": {"repo": LONE},
    "tool": "read_file",
    "args": {"path": LONE},
    "summary": LONE,
    "result": {"text": LONE},
    "error": LONE,
    "status": "failed",
    "output": LONE,
    "detail": LONE,
    "decision": "reject",
    "reason": LONE,
    "answer": LONE,
    "ids": [],
    "seq": 1,
    "instruction": LONE,
    "tools": [{"name": "t", "description": LONE}],
    "cancel_reason": LONE,
    "scope": "run",
    "note": LONE,
}


def _raw(body) -> bytes:
    raw = json.dumps(body).encode()  # ensure_ascii: the surrogate travels as \ud800
    assert b"\\ud800" in raw
    return raw


def _counts() -> dict[str, int]:
    return {m._meta.label: m.objects.count() for m in apps.get_models()}


@pytest.fixture
def callers(admin_user):
    """(a logged-in admin, an agent with an open session and a gated call in it)."""
    person = Client()
    person.force_login(admin_user)
    _, token = make_agent()
    bot = AgentClient(token)
    session = bot.session()
    call = bot.call(session, "delete_branch", {"name": "dev"}).json()
    return person, bot, {"session_id": session, "call_id": call["call"], "run_id": session}


def _operations():
    for path, ops in api.get_openapi_schema()["paths"].items():
        for method in ("post", "put", "patch"):
            if method in ops:
                yield path, method


def test_every_json_endpoint_is_walked():
    # A new endpoint lands in the walk below by itself; this only guards the walk's reach.
    paths = {path for path, _ in _operations()}
    assert {"/api/runs", "/api/external/sessions/{session_id}/calls", "/api/hooks/{agent}"} <= (
        paths
    )


@pytest.mark.parametrize(("path", "method"), list(_operations()))
def test_a_lone_surrogate_is_a_400_on_every_json_endpoint(callers, path, method, admin_user):
    person, bot, ids = callers
    filled = path.format(
        **ids,
        approval_id=bot.get(f"/calls/{ids['call_id']}").json()["approval"],
        agent="sql-analyst",
        token="not-a-token",
        op_id=1,
        pk=1,
        grant_id=1,
        plan_id=1,
        budget_id=Budget.objects.create(agent="sql-analyst", amount_usd=Decimal("5")).pk,
    )
    raw = _raw(BODY)
    before = _counts()
    if path.startswith("/api/external/"):
        response = bot.http.generic(method.upper(), filled, raw, "application/json")
    elif path.startswith("/api/hooks/"):
        secret = WebhookSecret.objects.create(agent="sql-analyst", name="walk")
        before = _counts()
        response = post_hook(Client(), raw, secret=secret.secret)
    else:
        response = person.generic(method.upper(), filled, raw, "application/json")
    assert response.status_code == 400, (filled, response.content)
    assert response.json()["detail"] == storable.SURROGATE_MESSAGE
    assert _counts() == before


@pytest.mark.parametrize("lone", ["\ud800", "\udfff", "x\udc00"])
def test_gateway_metadata_args_and_summary_with_a_surrogate_write_nothing(callers, lone):
    _, bot, ids = callers
    before = _counts()
    for response in (
        bot.post("/sessions", {"metadata": {"k": lone}}),
        bot.call(ids["session_id"], "read_file", {"path": lone}),
        bot.call(ids["session_id"], "read_file", {"path": "a"}, summary=lone),
        bot.call(ids["session_id"], "read_file", {lone: "a"}),
    ):
        assert response.status_code == 400, response.content
    assert _counts() == before


def test_a_surrogate_pair_is_a_character_and_is_accepted(callers):
    _, bot, ids = callers
    response = bot.call(ids["session_id"], "read_file", {"path": "\ud83d\ude00.txt"})
    assert response.status_code == 200, response.content
    assert response.json()["args"] == {"path": "\U0001f600.txt"}


def test_an_import_with_a_surrogate_on_one_line_is_refused(admin_user):
    person = Client()
    person.force_login(admin_user)
    lines = [json.dumps({"kind": "run", "id": str(uuid.uuid4())}), json.dumps({"x": LONE})]
    before = _counts()
    response = person.post("/api/imports", "\n".join(lines), content_type="application/x-ndjson")
    assert response.status_code == 400
    assert response.json()["detail"] == storable.SURROGATE_MESSAGE
    assert _counts() == before


def test_json_inside_a_form_field_is_checked_by_the_same_rule():
    with pytest.raises(storable.UnstorableText):
        storable.loads('{"a": "\\udfff"}')
    assert storable.loads('{"a": "\\ud83d\\ude00"}') == {"a": "\U0001f600"}
    # An escaped backslash before "ud800" is text, not a surrogate.
    assert storable.loads('{"a": "\\\\ud800"}') == {"a": "\\ud800"}
