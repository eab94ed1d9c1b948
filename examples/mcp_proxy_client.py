"""An MCP client whose tool calls go through agentops-mcp-proxy to the records server.

AGENTOPS_TOKEN=aoa_… uv run python examples/mcp_proxy_client.py [key]

`lookup` is read-only: agentops allows it at once. `delete_record` is destructive: it waits
until a person decides at /approvals/, then runs with exactly the approved arguments, or
comes back as a tool error with the rejection's reason (and never reaches the server).
"""

import asyncio
import os
import sys
from pathlib import Path

from mcp import Client, StdioServerParameters

HERE = Path(__file__).resolve().parent


async def main(key: str) -> None:
    proxy = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "agentops_client.mcp_proxy",
            "--agentops",
            os.environ.get("AGENTOPS_URL", "http://127.0.0.1:8000"),
            "--session",
            "mcp example",
            "--",  # the upstream MCP server, started by the proxy
            sys.executable,
            str(HERE / "mcp_records_server.py"),
        ],
        env=dict(os.environ),  # AGENTOPS_TOKEN for the proxy, which keeps it from the server
    )
    async with Client(proxy) as client:
        tools = [t.name for t in (await client.list_tools()).tools]
        print(f"tools: {', '.join(tools)}")
        for name, args in (("lookup", {"key": key}), ("delete_record", {"key": key})):
            result = await client.call_tool(name, args)
            text = " ".join(c.text for c in result.content if c.type == "text")
            print(f"{name}: {'ERROR ' if result.is_error else ''}{text}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "r-17"))
