"""A small MCP server for the tests of agents that take tools from MCP servers: a read-only
`stock_level`, a destructive `reserve_stock` with its read-only preview
`preview_reserve_stock`, and an unannotated `label_shelf`. Every call
appends one JSON line to the file named by MCP_CALL_LOG, so a test can count what really ran
on the server's side. Serves stdio, or streamable HTTP with `--http PORT` (127.0.0.1).

    uv run python tests/support/mcp_server.py [--http 9000]
"""

import json
import os
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("warehouse-test")
STOCK = {"A-1": 12, "B-2": 0}


def _log(tool: str, args: dict) -> None:
    path = os.environ.get("MCP_CALL_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"tool": tool, "args": args, "pid": os.getpid()}) + "\n")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def stock_level(sku: str) -> dict:
    """How many units of a SKU are in stock."""
    _log("stock_level", {"sku": sku})
    if sku not in STOCK:
        raise ToolError(f"unknown SKU {sku}")
    return {"sku": sku, "units": STOCK[sku]}


@server.tool(annotations=ToolAnnotations(destructiveHint=True))
def reserve_stock(sku: str, quantity: int) -> dict:
    """Reserve units of a SKU for an order (they leave the sellable stock)."""
    _log("reserve_stock", {"sku": sku, "quantity": quantity})
    return {"reserved": quantity, "sku": sku}


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def preview_reserve_stock(sku: str, quantity: int) -> dict:
    """What reserve_stock would change, without changing it (its effect preview)."""
    _log("preview_reserve_stock", {"sku": sku, "quantity": quantity})
    units = STOCK.get(sku, 0)
    change = {"subject": f"stock of {sku}", "before": {"units": units}}
    return {"changes": [{**change, "after": {"units": units - quantity}}]}


@server.tool()
def label_shelf(shelf: str, text: str) -> str:
    """Print a label for a shelf."""
    _log("label_shelf", {"shelf": shelf, "text": text})
    return f"labelled {shelf}"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def count_aisle(aisle: str, seconds: float) -> str:
    """Count an aisle's stock by hand: takes `seconds`."""
    _log("count_aisle", {"aisle": aisle})
    await anyio.sleep(seconds)
    return f"counted {aisle}"


@server.tool()
async def open_aisle(aisle: str, ctx: Context) -> str:
    """Open an aisle: its shelves become a tool of their own, and clients are told."""
    _log("open_aisle", {"aisle": aisle})

    def shelves() -> list[str]:
        """The shelves of the aisle just opened."""
        return [f"{aisle}-1", f"{aisle}-2"]

    server.add_tool(shelves, name=f"shelves_{aisle}")
    await ctx.notify_tools_changed()
    return f"opened {aisle}"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
