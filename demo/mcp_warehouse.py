"""The demo warehouse's MCP server: the `warehouse-clerk` agent takes its tools from it
(demo/agents.py). Started by agentops for each call over stdio (no Django here: it is the
kind of server another team would run). `stock_level` is read-only; `reserve_stock` takes
units out of the sellable stock and says so (destructiveHint), so agentops gates it.

Reservations are appended to WAREHOUSE_LOG (default: agentops-warehouse.jsonl in the
system's temporary directory), and stock levels count them.

    uv run python demo/mcp_warehouse.py [--http 9100]
"""

import json
import os
import sys
import tempfile
import zlib
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("demo-warehouse")
LOG = Path(
    os.environ.get("WAREHOUSE_LOG") or Path(tempfile.gettempdir(), "agentops-warehouse.jsonl")
)


def _reserved(sku: str) -> int:
    if not LOG.exists():
        return 0
    lines = (json.loads(line) for line in LOG.read_text().splitlines() if line.strip())
    return sum(r["quantity"] for r in lines if r["sku"] == sku)


def _on_hand(sku: str) -> int:
    # A stable made-up stock per SKU: the demo needs no database of its own.
    return zlib.crc32(sku.encode()) % 400 + 100


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def stock_level(sku: str) -> dict:
    """How many units of a SKU are on hand, reserved, and free to sell."""
    sku = sku.strip().upper()
    on_hand, reserved = _on_hand(sku), _reserved(sku)
    return {"sku": sku, "on_hand": on_hand, "reserved": reserved, "free": on_hand - reserved}


@server.tool(annotations=ToolAnnotations(destructiveHint=True))
def reserve_stock(sku: str, quantity: int, order_ref: str = "") -> dict:
    """Reserve units of a SKU for an order: they leave the sellable stock."""
    sku = sku.strip().upper()
    free = _on_hand(sku) - _reserved(sku)
    if quantity < 1 or quantity > free:
        raise ToolError(f"cannot reserve {quantity} of {sku}: {free} free")
    with LOG.open("a") as f:
        f.write(json.dumps({"sku": sku, "quantity": quantity, "order_ref": order_ref}) + "\n")
    return {"reserved": quantity, "sku": sku, "order_ref": order_ref, "free_after": free - quantity}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
