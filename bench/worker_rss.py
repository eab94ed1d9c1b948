"""Worker RSS before and after many short runs: does one worker process hold on to memory?

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentops_benchmark \
    REDIS_URL=redis://127.0.0.1:6379/12 \
        uv run --group bench python bench/worker_rss.py --runs 1000 --batch 100 --steps 2

Starts one real `celery -A bench.engine_throughput worker --pool threads -c C` subprocess,
then launches --runs scripted runs of the bench agent (--steps instant tool calls each) in
batches of --batch, waiting for each batch to finish, and prints the worker's VmRSS from
/proc/<pid>/status after a warm-up batch and after every batch. Stops the worker by PID.
"""

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import engine_throughput as et


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=20)
    args = parser.parse_args()
    from django.conf import settings
    from django.core.management import call_command

    if not (settings.IS_POSTGRES and settings.REDIS_URL):
        raise SystemExit("set DATABASE_URL (Postgres) and REDIS_URL; see the docstring")
    call_command("migrate", verbosity=0)
    proc = et.start_worker(args.concurrency)
    try:
        print(f"worker pid {proc.pid}: RSS at start {et.worker_rss_kb(proc.pid)} kB")
        # Warm-up: the first runs import templates, fill connection pools and caches.
        et.wait_finished(et.launch_runs(args.batch, args.steps), timeout=600)
        before = et.worker_rss_kb(proc.pid)
        print(f"RSS after a warm-up batch of {args.batch} runs: {before} kB")
        done = 0
        started = time.monotonic()
        while done < args.runs:
            n = min(args.batch, args.runs - done)
            et.wait_finished(et.launch_runs(n, args.steps), timeout=600)
            done += n
            print(f"  after {done:>5} runs: RSS {et.worker_rss_kb(proc.pid)} kB")
        after = et.worker_rss_kb(proc.pid)
        print(
            f"RSS before {before} kB, after {args.runs} more runs {after} kB: "
            f"{after - before:+d} kB ({100 * (after - before) / before:+.1f} %) "
            f"in {time.monotonic() - started:.0f} s; load {os.getloadavg()}"
        )
    finally:
        et.stop_worker(proc)


if __name__ == "__main__":
    main()
