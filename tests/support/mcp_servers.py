"""The test MCP server (tests/support/mcp_server.py) as an agent declares it: started by the
client over stdio, or serving streamable HTTP on 127.0.0.1 from a subprocess of the test."""

import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from agentkit.mcp import McpServer

SCRIPT = Path(__file__).resolve().parent / "mcp_server.py"


def stdio_server(name: str, call_log: Path, **declared) -> McpServer:
    return McpServer(
        name=name,
        command=(sys.executable, str(SCRIPT)),
        env={"MCP_CALL_LOG": str(call_log)},
        **declared,
    )


@contextlib.contextmanager
def http_server(call_log: Path, *, ready_within: float = 60) -> Iterator[str]:
    """Serve the test server over streamable HTTP; yields its URL. Stopped (by its pid) when
    the block ends."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--http", str(port)],
        env={"MCP_CALL_LOG": str(call_log), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + ready_within
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the MCP test server did not start") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def logged(call_log: Path) -> list[dict]:
    """Each call the server ran: tool, args and the server process's pid."""
    if not call_log.exists():
        return []
    return [json.loads(line) for line in call_log.read_text().splitlines() if line]


def calls(call_log: Path) -> list[dict]:
    """Each call the server ran: tool and args."""
    return [{k: v for k, v in c.items() if k != "pid"} for c in logged(call_log)]
