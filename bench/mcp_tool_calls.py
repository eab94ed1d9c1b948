"""What a tool from an MCP server costs a run: listing its tools, and one call, over stdio
(a server process started per call) and over streamable HTTP (a server already running).

    uv run python bench/mcp_tool_calls.py [--calls 5]

Uses the test server (tests/support/mcp_server.py) on 127.0.0.1; prints the median and the
slowest of each. Bounded: a few calls each, the HTTP server stopped at the end.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")

import django

django.setup()

from agentkit import mcp  # noqa: E402
from agentkit.tools import ToolContext  # noqa: E402
from tests.support.mcp_servers import http_server, stdio_server  # noqa: E402


def timed(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        started = time.perf_counter()
        fn()
        out.append((time.perf_counter() - started) * 1000)
    return out


def report(label: str, ms: list[float]) -> None:
    print(
        f"{label:<34} median {statistics.median(ms):7.0f} ms   max {max(ms):7.0f} ms  (n={len(ms)})"
    )


def measure(server: mcp.McpServer, label: str, calls: int) -> None:
    report(f"{label}: list tools", timed(lambda: mcp.tools_of(server, max_age=0), calls))
    tool = next(t for t in mcp.tools_of(server) if t.remote_name == "stock_level")

    def call():
        ctx = ToolContext(run_id="bench", idempotency_key="k", deadline=time.monotonic() + 60)
        assert tool.call({"sku": "A-1"}, ctx)["units"] == 12

    report(f"{label}: one call", timed(call, calls))
    mcp.forget()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=5)
    calls = min(parser.parse_args().calls, 50)
    log = Path(tempfile.mkdtemp()) / "calls.jsonl"
    measure(stdio_server("bench", log, timeout_seconds=60), "stdio", calls)
    with http_server(log) as url:
        measure(mcp.McpServer(name="bench", url=url), "streamable HTTP", calls)


if __name__ == "__main__":
    main()
