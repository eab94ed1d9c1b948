r"""Server time of a long run's page: the first screen of a 5 000-step run (aim: <= 200 ms).

    uv run python bench/run_page.py --steps 5000 --repeat 20            # embedded SQLite
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentops_bench \
        uv run python bench/run_page.py --steps 5000 --repeat 20

Makes one run with that many steps (the way the engine appends them), then times GET of its
page, of a kind filter and of a search through Django's full stack in-process (test client):
server time without network. Prints p50/p95 and the page's size and number of steps shown.
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

from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402

STEP = 'class="step '


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=20)
    options = parser.parse_args()
    setup_test_environment()
    call_command("migrate", verbosity=0)
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    from tests.runs.factories import add_steps, make_run

    user, _ = get_user_model().objects.get_or_create(username="bench-operator")
    user.groups.add(Group.objects.get_or_create(name="operator")[0])
    run = make_run(user)
    for _ in range(options.steps // 500):
        add_steps(run, 500)
    client = Client()
    client.force_login(user)
    run.refresh_from_db()
    pages = (
        ("first screen", {}),
        ("kind=tool", {"kind": "tool"}),
        ("search", {"q": "thinking 498"}),
    )
    for label, query in pages:
        times = []
        for _ in range(options.repeat):
            started = time.perf_counter()
            response = client.get(f"/runs/{run.pk}/", query)
            times.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200
        html = response.content.decode()
        times.sort()
        print(
            f"{label:>13}: p50 {statistics.median(times):6.1f} ms  "
            f"p95 {times[int(len(times) * 0.95) - 1]:6.1f} ms  "
            f"{len(html) // 1024} KiB, {html.count(STEP)} steps shown (run of {run.last_seq})"
        )


if __name__ == "__main__":
    main()
