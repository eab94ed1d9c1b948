"""What the pool's connection check (CONN_HEALTH_CHECKS, agentops/db/postgresql) costs per request.

    psql -h 127.0.0.1 -U postgres -c 'create database agentops_bench'
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentops_bench uv run manage.py migrate
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentops_bench \
        uv run python bench/pool_check.py --requests 2000 --rounds 10

Each request is an authenticated `GET /api/runs` through Django's full stack in-process
(test client; each request checks a connection out of the pool and returns it). Rounds
alternate the pool with and without the check (the pool is rebuilt between them), so a
drift of the machine shows in both. Prints the per-request time of each round and the
median of the paired differences, in milliseconds.
"""

import argparse
import logging
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")

import django

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.contrib.auth.models import Group  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402

from accounts.models import ApiToken  # noqa: E402


def use_check(enabled: bool) -> None:
    # Django reads CONN_HEALTH_CHECKS when it builds the pool: close it, the next request
    # builds a new one.
    connection.close()
    connection.close_pool()
    connection.settings_dict["CONN_HEALTH_CHECKS"] = enabled


def per_request_ms(client: Client, path: str, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        response = client.get(path)
        assert response.status_code == 200, response.status_code
    return (time.perf_counter() - start) / n * 1000


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=2000, help="per round")
    parser.add_argument("--rounds", type=int, default=10, help="pairs of rounds")
    parser.add_argument("--path", default="/api/runs")
    args = parser.parse_args()
    if not connection.settings_dict["OPTIONS"].get("pool"):
        sys.exit("needs DATABASE_URL=postgres://... with the pool on (DATABASE_POOL unset)")
    logging.disable(logging.WARNING)

    user, _ = get_user_model().objects.get_or_create(username="bench-pool-check")
    user.groups.add(Group.objects.get(name="viewer"))
    _, raw = ApiToken.issue(user, "bench")
    client = Client(headers={"Authorization": f"Bearer {raw}"}, SERVER_NAME="127.0.0.1")
    per_request_ms(client, args.path, 200)  # warm-up: imports, URL resolver, first queries

    diffs: list[float] = []
    for i in range(args.rounds):
        timings = {}
        # Alternate which goes first, so neither always runs on a warmer machine.
        for enabled in (True, False) if i % 2 else (False, True):
            use_check(enabled)
            timings[enabled] = per_request_ms(client, args.path, args.requests)
        diffs.append(timings[True] - timings[False])
        print(
            f"round {i + 1}: without {timings[False]:.3f} ms, with {timings[True]:.3f} ms,"
            f" difference {diffs[-1]:+.3f} ms"
        )
    use_check(True)
    print(
        f"check costs {statistics.median(diffs):+.3f} ms per request (median of {len(diffs)}"
        f" paired rounds of {args.requests} x GET {args.path}; min {min(diffs):+.3f},"
        f" max {max(diffs):+.3f})"
    )


if __name__ == "__main__":
    main()
