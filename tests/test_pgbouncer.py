"""Through PgBouncer in transaction mode (docs: running a fleet): the pages and exports that
read the most work with DATABASE_PGBOUNCER=true, against a real pgbouncer started here on a
private port in front of the test database."""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from tests.conftest import make_user
from tests.runs.factories import add_steps, make_run

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
REPO = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.skipif(not settings.IS_POSTGRES, reason="needs DATABASE_URL=postgres://…"),
    pytest.mark.django_db(transaction=True),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def pgbouncer():
    if not Path(PGBOUNCER).exists():
        pytest.fail("pgbouncer is not installed (apt-get install pgbouncer; .ci/run does)")
    db = connection.settings_dict
    port = free_port()
    # Not pytest's tmp_path: its parent is private to root, and pgbouncer runs as postgres.
    tmp_path = Path(tempfile.mkdtemp(prefix="agentops-pgbouncer-"))
    tmp_path.chmod(0o777)
    (tmp_path / "users.txt").write_text(f'"{db["USER"] or "postgres"}" ""\n')
    (tmp_path / "pgbouncer.ini").write_text(
        f"""[databases]
* = host={db["HOST"] or "127.0.0.1"} port={db["PORT"] or 5432}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {tmp_path / "users.txt"}
pool_mode = transaction
default_pool_size = 3
max_client_conn = 50
logfile = {tmp_path / "pgbouncer.log"}
pidfile = {tmp_path / "pgbouncer.pid"}
"""
    )
    for name in ("users.txt", "pgbouncer.ini"):
        (tmp_path / name).chmod(0o644)
    # PgBouncer refuses to run as root: as the postgres user then, like bench/chaos.py's cluster.
    as_user = ["-u", "postgres"] if os.geteuid() == 0 else []
    process = subprocess.Popen([PGBOUNCER, *as_user, str(tmp_path / "pgbouncer.ini")])
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert process.poll() is None, (tmp_path / "pgbouncer.log").read_text()
            assert time.monotonic() < deadline, "pgbouncer did not listen within 30 s"
            time.sleep(0.2)
    yield f"postgres://{db['USER'] or 'postgres'}@127.0.0.1:{port}/{db['NAME']}"
    process.terminate()
    process.wait(10)
    shutil.rmtree(tmp_path, ignore_errors=True)


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
