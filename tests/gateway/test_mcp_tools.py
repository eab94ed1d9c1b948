"""Registering an MCP server's tools (POST /api/external/tools/mcp): schema and risk from the
definitions' annotations; a re-registration never lowers what an admin set."""

import pytest

from gateway.models import ExternalTool

from .conftest import AgentClient, make_agent

pytestmark = pytest.mark.django_db

LOOKUP = {
    "name": "lookup",
    "description": "Read a record",
    "inputSchema": {
        "type": "object",
        "properties": {"key": {"type": "string"}},
        "required": ["key"],
    },
    "annotations": {"readOnlyHint": True},
}
DELETE = {
    "name": "delete_record",
    "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}}},
    "annotations": {"destructiveHint": True},
}
NOTE = {"name": "add_note", "inputSchema": {"type": "object"}}


def register(bot: AgentClient, *tools):
    return bot.post("/tools/mcp", {"tools": list(tools)})


def test_definitions_become_tools_with_their_schema_and_risk():
    agent, token = make_agent("mcp-bot")
    response = register(AgentClient(token), LOOKUP, DELETE, NOTE)
    assert response.status_code == 200, response.content
    rows = {t.name: t for t in agent.tools.all()}
    assert (rows["lookup"].reversible, rows["lookup"].blast) == (True, "none")
    assert rows["lookup"].input_schema == LOOKUP["inputSchema"]
    assert rows["lookup"].description == "Read a record"
    assert (rows["delete_record"].reversible, rows["delete_record"].blast) == (False, "high")
    assert (rows["add_note"].reversible, rows["add_note"].blast) == (False, "medium")
    assert [t["created"] for t in response.json()["tools"]] == [True, True, True]


def test_the_registered_schema_checks_calls_and_the_risk_gates_them():
    _, token = make_agent("mcp-bot")
    bot = AgentClient(token)
    register(bot, LOOKUP, DELETE)
    session = bot.session()
    assert bot.call(session, "lookup", {"key": "a"}).json()["status"] == "allowed"
    assert bot.call(session, "lookup", {}).status_code == 422  # key is required
    assert bot.call(session, "delete_record", {"key": "a"}).json()["status"] == "pending"


def test_reregistration_keeps_what_an_admin_raised_and_takes_a_new_schema():
    agent, token = make_agent("mcp-bot")
    bot = AgentClient(token)
    register(bot, LOOKUP)
    # An admin decides lookup reaches further than its server says.
    ExternalTool.objects.filter(agent=agent, name="lookup").update(reversible=False, blast="high")
    schema = {"type": "object", "properties": {"key": {"type": "string"}, "n": {"type": "integer"}}}
    response = register(bot, {**LOOKUP, "inputSchema": schema})
    assert response.json()["tools"] == [
        {
            "name": "lookup",
            "reversible": False,
            "blast": "high",
            "created": False,
            "kept_higher_risk": True,
        }
    ]
    row = agent.tools.get(name="lookup")
    assert (row.reversible, row.blast, row.input_schema) == (False, "high", schema)


def test_a_server_may_raise_a_tools_risk():
    agent, token = make_agent("mcp-bot")
    bot = AgentClient(token)
    register(bot, LOOKUP)
    register(bot, {**LOOKUP, "annotations": {"destructiveHint": True}})
    row = agent.tools.get(name="lookup")
    assert (row.reversible, row.blast) == (False, "high")


@pytest.mark.parametrize(
    "tools",
    [
        [{"description": "no name"}],
        [{"name": "x" * 65}],
        [{"name": "t", "inputSchema": "nope"}],
        [LOOKUP, LOOKUP],
        ["lookup"],
    ],
)
def test_bad_definitions_are_422_and_register_nothing(tools):
    agent, token = make_agent("mcp-bot")
    response = register(AgentClient(token), NOTE, *tools)
    assert response.status_code == 422, response.content
    assert not agent.tools.filter(name="add_note").exists()


def test_a_wrong_token_registers_nothing(client):
    response = client.post(
        "/api/external/tools/mcp",
        {"tools": [NOTE]},
        content_type="application/json",
        HTTP_AUTHORIZATION="Bearer aoa_wrong",
    )
    assert response.status_code == 401
    assert not ExternalTool.objects.filter(name="add_note").exists()
