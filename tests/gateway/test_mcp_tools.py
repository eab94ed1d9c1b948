"""Registering an MCP server's tools (POST /api/external/tools/mcp): schema from the
definitions, risk raised by their annotations and never lowered (the agent does not pick its
own risk); a re-registration keeps what an admin set."""

import pytest

from gateway.models import ExternalTool

from .conftest import GATES, AgentClient, make_agent

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
    # Read-only by the server's word only: gated as any unknown tool until an admin says so.
    assert (rows["lookup"].reversible, rows["lookup"].blast) == (False, "medium")
    assert rows["lookup"].input_schema == LOOKUP["inputSchema"]
    assert rows["lookup"].description == "Read a record"
    assert (rows["delete_record"].reversible, rows["delete_record"].blast) == (False, "high")
    assert (rows["add_note"].reversible, rows["add_note"].blast) == (False, "medium")
    assert [t["created"] for t in response.json()["tools"]] == [True, True, True]
    assert [t["read_only_hint"] for t in response.json()["tools"]] == [True, False, False]


def test_a_read_only_hint_does_not_let_a_new_tool_through():
    """An agent whose server calls `delete_everything` read-only is asked about it."""
    _, token = make_agent("mcp-bot")
    bot = AgentClient(token)
    register(bot, {**DELETE, "name": "delete_everything", "annotations": {"readOnlyHint": True}})
    session = bot.session()
    assert bot.call(session, "delete_everything", {"key": "a"}).json()["status"] == "pending"


def test_an_admin_lowers_a_read_only_tool_and_a_new_registration_keeps_it():
    agent, token = make_agent("mcp-bot")
    bot = AgentClient(token)
    register(bot, LOOKUP)
    ExternalTool.objects.filter(agent=agent, name="lookup").update(reversible=True, blast="none")
    register(bot, LOOKUP)
    row = agent.tools.get(name="lookup")
    assert (row.reversible, row.blast) == (True, "none")
    assert bot.call(bot.session(), "lookup", {"key": "a"}).json()["status"] == "allowed"


def test_the_registered_schema_checks_calls_and_the_risk_gates_them():
    # The admin's word that lookup only reads: never_gate in the agent's rules.
    _, token = make_agent("mcp-bot", gates={**GATES, "never_gate": ["lookup"]})
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
            "read_only_hint": True,
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
