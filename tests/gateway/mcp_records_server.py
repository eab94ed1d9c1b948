"""A small MCP server for the proxy's tests: a read-only `lookup` and a destructive
`delete_record`, each writing what it was called with, one JSON line per call, to the file
named by RECORDS_CALL_LOG. Run over stdio (default) or streamable HTTP (`--http PORT`)."""

import json
import os
import sys

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("records")


def _log(tool: str, args: dict) -> None:
    with open(os.environ["RECORDS_CALL_LOG"], "a") as f:
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
