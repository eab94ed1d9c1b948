"""Through PgBouncer in transaction mode (docs: running a fleet): the pages and exports that
read the most work with DATABASE_PGBOUNCER=true, against a real pgbouncer started here on a
private port in front of the test database."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from tests.conftest import make_user
from tests.runs.factories import add_steps, make_run
from tests.support.pgbouncer import PgBouncer

REPO = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.skipif(not settings.IS_POSTGRES, reason="needs DATABASE_URL=postgres://…"),
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def pgbouncer():
    db = connection.settings_dict
    bouncer = PgBouncer(
        db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432), db["USER"] or "postgres"
    )
    try:
        bouncer.start()
    except RuntimeError as exc:
        pytest.fail(f"{exc} (.ci/run installs pgbouncer)")
    yield bouncer.url(db["NAME"])
    bouncer.stop()


def test_exports_and_the_queue_work_through_pgbouncer(pgbouncer, no_enqueue, django_user_model):
    admin = make_user(django_user_model, "ada", "admin", "operator", "approver")
    run = make_run(admin)
    add_steps(run, 1200)  # more than one keyset batch of the export
    done = subprocess.run(
        [sys.executable, str(REPO / "tests" / "support" / "through_pgbouncer.py"), str(run.pk),
         "ada"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "DATABASE_URL": pgbouncer, "DATABASE_PGBOUNCER": "true",
             "PYTHONPATH": str(REPO)},
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    steps = run.steps.count()
    checkpoints = run.checkpoints.count()
    assert seen == {
        "cursors_off": True,
        "export": 200,
        "export_lines": 1 + steps + checkpoints,
        "queue": 200,
        "stats": 200,
        "decisions_export": 200,
        "chain": [True, None],
    }
