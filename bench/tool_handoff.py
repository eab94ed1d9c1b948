"""What enforcing tool deadlines costs a call: the hand-off to a pool thread and back.

    uv run python bench/tool_handoff.py [--calls 20000]

Calls an instant no-op tool N times directly (as before deadlines were enforced) and N times
through runs/engine/deadlines.py (a reusable pool thread, waited on until its deadline), and
prints the median and p99 per call of each and their difference. No database is touched.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")

import django

django.setup()

from agentkit.tools import Blast, ToolContext, get_tool, tool  # noqa: E402
from runs.engine import deadlines  # noqa: E402


@tool(reversible=True, blast=Blast.NONE, name="bench_noop")
def bench_noop(n: int) -> int:
    """Instant."""
    return n


def timed(call, calls: int) -> list[float]:
    out = []
    for i in range(calls):
        started = time.perf_counter()
        call(i)
        out.append((time.perf_counter() - started) * 1e6)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20_000)
    calls = parser.parse_args().calls
    noop = get_tool("bench_noop")

    def ctx() -> ToolContext:
        return ToolContext(run_id="bench", idempotency_key="k", deadline=time.monotonic() + 10)

    direct = timed(lambda i: noop.call({"n": i}, ctx()), calls)
    pooled = timed(lambda i: deadlines.call(noop, {"n": i}, ctx()), calls)
    for name, xs in (("direct", direct), ("pool thread", pooled)):
        xs.sort()
        print(
            f"{name:12} p50 {statistics.median(xs):7.1f} us   p99 {xs[int(len(xs) * 0.99)]:7.1f} us"
        )
    print(
        f"hand-off     p50 {statistics.median(pooled) - statistics.median(direct):7.1f} us per call"
    )


if __name__ == "__main__":
    main()
