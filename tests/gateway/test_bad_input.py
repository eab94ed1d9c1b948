"""What an agent sends is capped like a person's API input (a clear 413, nothing written), and a
tool's name is a name."""

import pytest

from approvals.models import Approval
from gateway.models import ExternalCall, ExternalTool
from runs.models import Run

LIMIT = 2_000


@pytest.fixture(autouse=True)
def _small_limit(settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "MAX_INPUT_BYTES": LIMIT}


def _nothing_written(session: str) -> None:
    assert Run.objects.get(pk=session).last_seq == 1
    assert not ExternalCall.objects.exists() and not Approval.objects.exists()


def test_large_arguments_are_a_413_and_write_nothing(bot):
    session = bot.session()
    # Under the raw body cap (limit + slack), over the limit for arguments.
    response = bot.call(session, "read_file", {"path": "x" * (LIMIT + 100)})
    assert response.status_code == 413
    assert f"args is {LIMIT + 100 + 11} bytes; the limit is {LIMIT}" in response.json()["detail"]
    _nothing_written(session)


def test_a_huge_body_is_refused_before_it_is_parsed(bot):
    session = bot.session()
    response = bot.call(session, "read_file", {"path": "x" * 2_000_000})
    assert response.status_code == 413
    assert "request body larger than" in response.json()["detail"]
    _nothing_written(session)


def test_a_long_summary_is_a_413_not_cut(bot):
    session = bot.session()
    response = bot.call(session, "read_file", {"path": "a"}, summary="s" * 4001)
    assert response.status_code == 413 and "summary" in response.json()["detail"]
    _nothing_written(session)
    assert bot.call(session, "read_file", {"path": "a"}, summary="s" * 4000).status_code == 200


def test_large_metadata_results_and_output_are_413(bot):
    assert bot.post("/sessions", {"metadata": {"m": "x" * (LIMIT + 1)}}).status_code == 413
    assert Run.objects.count() == 0
    session = bot.session()
    call = bot.call(session, "read_file", {"path": "a"}).json()["call"]
    big = "r" * (LIMIT + 1)
    assert bot.post(f"/calls/{call}/result", {"result": {"text": big}}).status_code == 413
    assert bot.post(f"/calls/{call}/result", {"error": big}).status_code == 413
    assert ExternalCall.objects.get().result_seq is None
    assert bot.post(f"/sessions/{session}/close", {"output": big}).status_code == 413
    assert Run.objects.get(pk=session).status == "running"


@pytest.mark.parametrize(
    "name",
    [
        "<img src=x onerror=alert(1)>",
        "pay invoice",
        "read_file\n",
        "drop;table",
        "x" * 65,
        "-leading-dash",
        "ünïcode",
    ],
)
def test_a_tool_name_must_be_a_name(bot, name):
    session = bot.session()
    response = bot.call(session, name, {})
    assert response.status_code == 422, response.content
    _nothing_written(session)


@pytest.mark.parametrize("name", ["Bash", "mcp__github__create_issue", "records.read-v2", "x" * 64])
def test_names_agents_use_are_names(bot, name):
    session = bot.session()
    assert bot.call(session, name, {}).status_code in (200, 202)


def test_mcp_registration_refuses_a_tool_name_that_is_not_a_name(bot):
    response = bot.post("/tools/mcp", {"tools": [{"name": "ok"}, {"name": "<b>bold</b>"}]})
    assert response.status_code == 422 and "is not a name" in response.json()["detail"]
    assert not ExternalTool.objects.filter(name__in=["ok", "<b>bold</b>"]).exists()
