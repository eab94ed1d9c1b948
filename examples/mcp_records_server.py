"""A small MCP server to put behind agentops-mcp-proxy (the proxy's tests use it too): a
read-only `lookup` and a destructive `delete_record`, each appending what it was called with,
one JSON line per call, to the file named by RECORDS_CALL_LOG (default
mcp-records-calls.jsonl). Serves stdio, or streamable HTTP with `--http PORT`.

    uv run python examples/mcp_records_server.py [--http 9000]
"""

import json
import os
import sys

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("records")


def _log(tool: str, args: dict) -> None:
    with open(os.environ.get("RECORDS_CALL_LOG", "mcp-records-calls.jsonl"), "a") as f:
        f.write(json.dumps({"tool": tool, "args": args}) + "\n")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def lookup(key: str) -> str:
    """Read one record."""
    _log("lookup", {"key": key})
    return f"record {key}: ok"


@server.tool(annotations=ToolAnnotations(destructiveHint=True))
def delete_record(key: str, reason: str = "") -> str:
    """Delete one record for good."""
    _log("delete_record", {"key": key, "reason": reason})
    return f"deleted {key}"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
