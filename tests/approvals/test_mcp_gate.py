"""An agent whose tools come from an MCP server (agentkit/mcp.py), end to end: the run is
gated on the server's destructive tool, a person approves, the tool runs once on the real
server (stdio, and streamable HTTP on 127.0.0.1), and its result is in the timeline."""

import pytest

from agentkit import mcp
from agentkit.agents import CATALOGUE, Agent, GateRules, register
from agentkit.llm.scripted import text, tool_use
from approvals import decisions
from approvals.models import Approval
from demo.agents import last_tool_result
from runs.models import Run, SideEffect, Step
from tests.support.mcp_servers import calls, http_server, stdio_server

from .conftest import AskInput, drive, launch

pytestmark = pytest.mark.django_db(transaction=True)

SLUG = "test-mcp-stocker"


def script(data: dict) -> list:
    return [
        [tool_use("wh_stock_level", sku="A-1")],
        [tool_use("wh_reserve_stock", sku="A-1", quantity=3)],
        lambda messages: [text(f"Result: {last_tool_result(messages)}")],
    ]


def agent_with(server: mcp.McpServer) -> Agent:
    return register(
        Agent(
            slug=SLUG,
            title="MCP stocker",
            description="test agent with MCP tools",
            model="claude-sonnet-4-6",
            system_prompt="You are a test agent.",
            tools=(),
            input_form=AskInput,
            prompt=lambda d: f"Reserve: {d}",
            script=script,
            # The owner vouches for the read-only lookup; the rest is as the server hints.
            gates=GateRules(never_gate=("wh_stock_level",)),
            mcp_servers=(server,),
        )
    )


@pytest.fixture
def declare(tmp_path):
    declared = []

    def make(server: mcp.McpServer) -> Agent:
        declared.append(server)
        return agent_with(server)

    yield make
    CATALOGUE.pop(SLUG, None)
    for server in declared:
        mcp.SERVERS.pop(server.name, None)
    mcp.forget()


def _gate_approve_execute(run: Run, approver, call_log) -> None:
    assert drive(run) == Run.Status.WAITING
    approval = Approval.objects.get(run=run, status=Approval.Status.PENDING)
    assert approval.tool == "wh_reserve_stock"
    assert approval.args == {"sku": "A-1", "quantity": 3}
    assert approval.risk == "high"  # destructiveHint raised the unknown tool's medium
    # The read-only lookup ran (the owner let it through); the reservation waits.
    assert [c["tool"] for c in calls(call_log)] == ["stock_level"]

    decisions.decide(approval.pk, user=approver, decision="approve")
    assert drive(run) == Run.Status.SUCCEEDED

    assert calls(call_log) == [
        {"tool": "stock_level", "args": {"sku": "A-1"}},
        {"tool": "reserve_stock", "args": {"sku": "A-1", "quantity": 3}},
    ]
    tool_step = run.steps.filter(kind=Step.Kind.TOOL, data__tool="wh_reserve_stock").get()
    assert tool_step.data["result"] == {"reserved": 3, "sku": "A-1"}
    assert tool_step.data["approval"] == str(approval.pk)
    effect = SideEffect.objects.get(run=run, tool="wh_reserve_stock")
    assert effect.status == SideEffect.Status.COMMITTED
    assert "'reserved': 3" in run.output
    assert run.verify_chain() == (True, None)


def test_a_gated_mcp_tool_runs_once_after_approval_over_stdio(
    declare, operator, approver, no_enqueue, tmp_path
):
    log = tmp_path / "calls.jsonl"
    agent = declare(stdio_server("wh", log))
    run = launch(SLUG, {"topic": "order 7"}, by=operator)
    tools = {t["name"]: t for t in run.agent_config["tools"]}
    assert set(tools) == {
        "wh_stock_level",
        "wh_reserve_stock",
        "wh_label_shelf",
        "wh_open_aisle",
        "wh_count_aisle",
        "wh_preview_reserve_stock",
    }
    assert tools["wh_stock_level"]["mcp"]["read_only_hint"] is True
    assert run.agent_config["mcp"] == [
        {**agent.mcp_servers[0].as_dict(), "tools": sorted(tools, key=list(tools).index)}
    ]
    _gate_approve_execute(run, approver, log)


def test_a_gated_mcp_tool_runs_once_after_approval_over_streamable_http(
    declare, operator, approver, no_enqueue, tmp_path
):
    log = tmp_path / "calls.jsonl"
    with http_server(log) as url:
        declare(mcp.McpServer(name="wh", url=url))
        run = launch(SLUG, {"topic": "order 8"}, by=operator)
        assert run.agent_config["mcp"][0]["transport"] == "streamable-http"
        _gate_approve_execute(run, approver, log)


def test_a_rejected_mcp_call_never_reaches_the_server(
    declare, operator, approver, no_enqueue, tmp_path
):
    log = tmp_path / "calls.jsonl"
    declare(stdio_server("wh", log))
    run = launch(SLUG, {"topic": "order 9"}, by=operator)
    assert drive(run) == Run.Status.WAITING
    approval = Approval.objects.get(run=run, status=Approval.Status.PENDING)
    decisions.decide(approval.pk, user=approver, decision="reject", reason="no stock moves today")
    assert drive(run) == Run.Status.SUCCEEDED
    assert [c["tool"] for c in calls(log)] == ["stock_level"]
    step = run.steps.get(kind=Step.Kind.TOOL, data__tool="wh_reserve_stock")
    assert "no stock moves today" in step.data["error"]


def test_the_server_s_preview_of_a_gated_call_is_on_the_card_and_checked_again(
    declare, operator, approver, no_enqueue, tmp_path
):
    log = tmp_path / "calls.jsonl"
    declare(stdio_server("wh", log, previews={"reserve_stock": "preview_reserve_stock"}))
    run = launch(SLUG, {"topic": "order 10"}, by=operator)
    assert run.agent_config["mcp"][0]["previews"] == {"reserve_stock": "preview_reserve_stock"}
    assert drive(run) == Run.Status.WAITING
    approval = Approval.objects.get(run=run, status=Approval.Status.PENDING)
    # Computed by the server's read-only preview tool when the gate opened; nothing reserved.
    assert approval.preview["changes"] == [
        {"subject": "stock of A-1", "before": {"units": 12}, "after": {"units": 9}}
    ]
    assert [c["tool"] for c in calls(log)] == ["stock_level", "preview_reserve_stock"]
    decisions.decide(
        approval.pk,
        user=approver,
        decision="approve",
        shown_preview_hash=approval.preview["hash"],
    )
    assert drive(run) == Run.Status.SUCCEEDED
    # Asked again at the decision (the data could have changed), then the call ran once.
    assert [c["tool"] for c in calls(log)] == [
        "stock_level",
        "preview_reserve_stock",
        "preview_reserve_stock",
        "reserve_stock",
    ]


def test_a_preview_the_server_cannot_give_is_shown_as_an_error_and_gates_nothing_away(
    declare, operator, approver, no_enqueue, tmp_path
):
    log = tmp_path / "calls.jsonl"
    declare(stdio_server("wh", log, previews={"reserve_stock": "no_such_tool"}))
    run = launch(SLUG, {"topic": "order 11"}, by=operator)
    assert drive(run) == Run.Status.WAITING
    approval = Approval.objects.get(run=run, status=Approval.Status.PENDING)
    assert "could not be computed" in approval.preview["error"]
    assert [c["tool"] for c in calls(log)] == ["stock_level"]
