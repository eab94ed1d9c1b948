"""Read-only tool calls of one turn, one after another vs together (runs/engine/parallel.py).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentops_bench \
        uv run python bench/parallel_tools.py [--runs 5] [--limits 1,2,4] [--seconds 0.5]

Runs the demo agent **Shipping quotes** in this process (runs.engine.advance, the scripted
model, no Celery): its first turn asks four carriers' quote APIs at once, each answering after
`--seconds` (demo.tools.QUOTE_API_SECONDS), its second names the cheapest. For each limit of
AGENTOPS["MAX_PARALLEL_TOOLS"] (1 is one after another), `--runs` runs one after another;
prints the median and the slowest wall time per run (launch written to run finished) and the
speed-up against the first limit. Migrates the configured database first.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
os.environ.setdefault("DEBUG", "false")
os.environ.setdefault("SECRET_KEY", "bench-only-not-a-secret")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402

from agentkit.agents import get_agent  # noqa: E402
from bench.common import machine  # noqa: E402
from demo import tools as demo_tools  # noqa: E402
from runs import engine, queue  # noqa: E402
from runs.models import Run  # noqa: E402


def one_run(agent) -> float:
    """The run's wall seconds, from its launch to its end written."""
    started = time.monotonic()
    run = engine.launch(
        agent=agent,
        input={"weight_kg": "4", "destination": "Lyon, France"},
        provider="scripted",
    )
    while engine.advance(run.pk, time_slice=60) == "requeued":
        pass
    wall = time.monotonic() - started
    run.refresh_from_db()
    if run.status != Run.Status.SUCCEEDED:
        sys.exit(f"run {run.pk} ended {run.status}: {run.termination_reason}")
    assert run.steps.filter(kind="tool").count() == len(demo_tools.CARRIERS)
    return wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--limits", default="1,2,4")
    parser.add_argument("--seconds", type=float, default=demo_tools.QUOTE_API_SECONDS)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    queue.enqueue = lambda run_id: None  # this process advances the runs itself
    demo_tools.QUOTE_API_SECONDS = args.seconds
    agent = get_agent("shipping-quotes")
    print(machine())
    print(
        f"{len(demo_tools.CARRIERS)} lookups of {args.seconds:g} s in one turn, "
        f"{args.runs} runs per limit, database {settings.DATABASES['default']['ENGINE']}"
    )
    one_run(agent)  # warm-up: connections, the tool threads
    baseline = None
    for limit in (int(x) for x in args.limits.split(",")):
        settings.AGENTOPS["MAX_PARALLEL_TOOLS"] = limit
        walls = [one_run(agent) for _ in range(args.runs)]
        median = statistics.median(walls)
        baseline = baseline or median
        print(
            f"limit {limit}: run wall p50 {median:.3f} s, max {max(walls):.3f} s, "
            f"speed-up x{baseline / median:.2f}"
        )
    print(machine())


if __name__ == "__main__":
    main()
