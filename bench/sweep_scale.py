"""Recovery at scale: N runs whose worker died (lease expired) and one sweep.

Seeds N runs `running` under an expired lease (written directly, as a fleet restart leaves
them), then times one `engine.sweep()` against the real broker: every run re-sent, in
batches, and how long that took. A second sweep then sends nothing (each run has its
message, waiting in the queue behind the others), and a third, with the broker's marker gone
(what a Redis restart does), sends every run again. Needs Postgres and Redis:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentops_bench_sweep \\
    REDIS_URL=redis://127.0.0.1:6379/12 uv run python bench/sweep_scale.py --runs 100000

It migrates its database, and empties its runs and its Redis database's queues at the start
and the end (use databases of its own).
"""

import argparse
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.utils import timezone  # noqa: E402

from agentops.celery import app  # noqa: E402
from bench.common import machine  # noqa: E402
from runs import engine, queue  # noqa: E402
from runs.models import Run  # noqa: E402


def seed(count: int) -> None:
    gone = timezone.now() - timedelta(minutes=5)
    template = dict(
        agent="refund-desk",
        agent_config={},
        provider="scripted",
        input={},
        max_steps=10,
        max_cost_usd=1,
        max_seconds=600,
        max_consecutive_errors=3,
        status=Run.Status.RUNNING,
        lease_owner="dead-worker",
        lease_expires_at=gone,
        started_at=gone - timedelta(minutes=1),
    )
    for start in range(0, count, 5000):
        Run.objects.bulk_create([Run(**template) for _ in range(min(5000, count - start))])


def clean() -> None:
    app.control.purge()
    Run.objects.filter(lease_owner="dead-worker").delete()


def timed(label: str) -> int:
    began = time.perf_counter()
    sent = engine.sweep()
    took = time.perf_counter() - began
    rate = sent / took if took else 0
    print(f"{label}: {sent} re-sent in {took:.1f} s ({rate:.0f} runs/s); queue {queue.depth()}")
    return sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres") or not os.environ.get(
        "REDIS_URL"
    ):
        sys.exit("needs DATABASE_URL=postgres://... and REDIS_URL=redis://... of its own")
    call_command("migrate", verbosity=0)
    clean()
    print(machine())
    began = time.perf_counter()
    seed(args.runs)
    print(f"seeded {args.runs} runs under expired leases in {time.perf_counter() - began:.1f} s")
    queue.broker_lost_messages()  # the marker: this broker has lost nothing yet
    try:
        first = timed("sweep 1 (fleet restart)")
        second = timed("sweep 2 (the same runs, waiting in the queue)")
        with app.pool.acquire(block=True) as conn:
            conn.default_channel.queue_purge(queue.MARKER_QUEUE)
        app.control.purge()  # the broker lost its data
        third = timed("sweep 3 (the broker lost every message)")
        print(machine())
        ok = first == args.runs and second == 0 and third == args.runs
        print("OK" if ok else "UNEXPECTED: every run once, none twice, all after a loss")
    finally:
        clean()


if __name__ == "__main__":
    main()
