"""The warehouse-clerk demo: its tools come from the bundled MCP server (demo/mcp_warehouse.py,
over stdio); the lookup runs, the reservation waits for a person and then reserves once."""

import json
from dataclasses import replace

import pytest

from agentkit import mcp
from agentkit.agents import CATALOGUE
from approvals import decisions
from approvals.models import Approval
from demo.agents import WAREHOUSE
from runs import engine
from runs.models import Run

from .test_demo_flows import launch_default

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def warehouse_log(tmp_path, monkeypatch):
    """The demo server, writing its reservations where this test reads them."""
    log = tmp_path / "warehouse.jsonl"
    server = replace(WAREHOUSE, env={"WAREHOUSE_LOG": str(log)})
    monkeypatch.setitem(mcp.SERVERS, "warehouse", server)
    agent = CATALOGUE["warehouse-clerk"]
    monkeypatch.setitem(CATALOGUE, "warehouse-clerk", replace(agent, mcp_servers=(server,)))
    mcp.forget()
    yield log
    mcp.forget()


def test_the_reservation_is_gated_and_made_once_approved(
    warehouse_log, operator, approver, no_enqueue
):
    run = launch_default("warehouse-clerk", operator)
    assert {t["name"] for t in run.agent_config["tools"]} == {
        "warehouse_stock_level",
        "warehouse_reserve_stock",
    }
    assert engine.advance(run.pk, time_slice=60) == Run.Status.WAITING
    approval = Approval.objects.get(run=run, status=Approval.Status.PENDING)
    assert approval.tool == "warehouse_reserve_stock" and approval.risk == "high"
    assert "cannot be undone" in approval.explanation
    assert not warehouse_log.exists()

    decisions.decide(approval.pk, user=approver, decision="approve")
    assert engine.advance(run.pk, time_slice=60) == Run.Status.SUCCEEDED
    reserved = [json.loads(line) for line in warehouse_log.read_text().splitlines()]
    assert reserved == [{"sku": "KB-101", "quantity": 5, "order_ref": "SO-1042"}]
    run.refresh_from_db()
    assert run.output == "Reserved 5 of KB-101."
