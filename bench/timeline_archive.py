"""The timeline over months: steps written into monthly partitions, then archived and restored.

Seeds RUNS finished runs of STEPS steps each, spread over the last MONTHS months (each run's
timeline in its creation month's partition), written by the product's own write path
(Run.append_step: the compare-and-set UPDATE and the INSERT in one statement), ten steps per
transaction. Prints the partitions' sizes (pg_total_relation_size: table, indexes, TOAST),
then archives every run of the oldest months (runs/retention/archive.py: write the zstd JSON
Lines file, read it back and verify every chain, drop the month's partitions or delete the
rows), verifies one file again, restores one file, and prints the rates and sizes after.
Needs Postgres (a database of its own: it is emptied of runs at the start):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentops_bench_archive \\
    uv run python bench/timeline_archive.py --runs 2000 --steps 100
"""

import argparse
import os
import sys
import tempfile
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.utils import timezone  # noqa: E402

from bench.common import machine  # noqa: E402
from runs.models import ArchivedRun, Run, Step  # noqa: E402
from runs.retention import archive, partitions  # noqa: E402

LLM = {
    "model": "claude-sonnet-4-5",
    "content": [
        {"type": "text", "text": "Looking the order up before deciding on the refund."},
        {"type": "tool_use", "id": "t", "name": "lookup_order", "input": {"order_id": 42}},
    ],
    "stop_reason": "tool_use",
    "usage": {"input_tokens": 900, "output_tokens": 60},
}
TOOL = {
    "tool_use_id": "t",
    "tool": "lookup_order",
    "args": {"order_id": 42},
    "is_error": False,
    "attempts": 1,
    "duration_ms": 3,
    "result": {"order": 42, "amount": "19.90", "status": "delivered", "items": ["mug", "tea"]},
}


def seed(runs: int, steps: int, months: int) -> list[Run]:
    now = timezone.now()
    made = []
    for i in range(runs):
        created = now - timedelta(days=30 * (1 + i % months), minutes=i)
        partitions.ensure(partitions.month_of(created))
        made.append(
            Run(
                agent="refund-desk",
                agent_config={},
                provider="scripted",
                input={"order_id": 42},
                max_steps=steps + 1,
                max_cost_usd=100,
                max_seconds=600,
                max_consecutive_errors=3,
                status=Run.Status.RUNNING,
                created_at=created,
                started_at=created,
            )
        )
    Run.objects.bulk_create(made, batch_size=2000)
    return made


def write_steps(runs: list[Run], steps: int) -> float:
    began = time.perf_counter()
    for run in runs:
        for start in range(0, steps, 10):
            with transaction.atomic():
                locked = Run.locked(run.pk)
                for i in range(start, min(steps, start + 10)):
                    if i % 2 == 0:
                        locked.append_step(Step.Kind.LLM, LLM, cost_usd=Decimal("0.0031"))
                    else:
                        locked.append_step(Step.Kind.TOOL, TOOL)
    Run.objects.filter(pk__in=[r.pk for r in runs]).update(
        status=Run.Status.SUCCEEDED, termination_reason="completed"
    )
    return time.perf_counter() - began


def show_sizes(label: str) -> None:
    print(f"{label}:")
    total = 0
    for name, rows, size in partitions.sizes():
        total += size
        if rows or size > 64 * 1024:
            print(f"  {name:28} {rows:>9} rows  {size / 2**20:8.1f} MiB")
    print(f"  {'all partitions':28} {'':>9}       {total / 2**20:8.1f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--months", type=int, default=3, help="months the runs spread over")
    parser.add_argument("--batch", type=int, default=500, help="runs per archive file")
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        sys.exit("needs DATABASE_URL=postgres://… (a database of its own)")
    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:  # a database of its own: start empty
        cursor.execute("SET session_replication_role = replica")
        cursor.execute("TRUNCATE runs_run CASCADE")
        cursor.execute("SET session_replication_role = DEFAULT")
    print(machine())
    runs = seed(args.runs, args.steps, args.months)
    took = write_steps(runs, args.steps)
    written = args.runs * args.steps
    print(
        f"wrote {written} steps of {args.runs} runs in {took:.1f} s: {written / took:.0f} steps/s"
    )
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE runs_step")
        cursor.execute("VACUUM ANALYZE runs_checkpoint")
    show_sizes("partitions after writing")

    # Every run of all months but the newest: whole months, so their partitions are dropped.
    newest = max(partitions.month_of(r.created_at) for r in runs)
    old = [
        r
        for r in Run.objects.order_by("created_at", "id")
        if partitions.month_of(r.created_at) < newest
    ]
    directory = Path(tempfile.mkdtemp(prefix="timeline-archive-"))
    files, archived_steps, began = [], 0, time.perf_counter()
    for start in range(0, len(old), args.batch):
        path = directory / f"bench-{start // args.batch:04d}.jsonl.zst"
        done = archive.archive(old[start : start + args.batch], path)
        files.append(path)
        archived_steps += done.steps
    took = time.perf_counter() - began
    size = sum(f.stat().st_size for f in files)
    print(
        f"archived {len(old)} runs, {archived_steps} steps in {took:.1f} s: "
        f"{archived_steps / took:.0f} steps/s (written, read back and verified, then removed); "
        f"{len(files)} files, {size / 2**20:.1f} MiB ({size / max(archived_steps, 1):.0f} B/step)"
    )
    show_sizes("partitions after archiving")

    began = time.perf_counter()
    check = archive.verify(files[0])
    took = time.perf_counter() - began
    steps = sum(len(r.steps) for r in check.runs)
    print(f"verified {files[0].name} again: ok={check.ok}, {steps} steps in {took:.2f} s")
    began = time.perf_counter()
    restored = archive.restore(files[0])
    took = time.perf_counter() - began
    print(
        f"restored {len(restored)} runs, {steps} steps in {took:.1f} s: {steps / took:.0f} steps/s"
    )
    sample = Run.objects.get(pk=restored[0])
    print(f"a restored run's chain verifies: {sample.verify_chain() == (True, None)}")
    print(f"runs still archived: {ArchivedRun.objects.count()}; files in {directory}")
    print(machine())


if __name__ == "__main__":
    main()
