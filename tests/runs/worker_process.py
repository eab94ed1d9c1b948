"""A real worker process for the crash tests.

    python -m tests.runs.worker_process advance RUN_ID   # what a Celery task does
    python -m tests.runs.worker_process sweep            # what celery beat's sweep does

The database comes from DATABASE_URL (the test database). With CELERY_TASK_ALWAYS_EAGER=true,
a run the sweep re-enqueues is advanced right here, as a worker would on receiving it.
"""

import os
import sys

import django


def main(argv: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
    django.setup()

    from runs import engine

    from . import harness

    harness.register_agent()
    harness.kill_process_after(os.environ.get("TEST_KILL_AFTER_TOOL"))
    command = argv[0]
    if command == "advance":
        print(engine.advance(argv[1], time_slice=30), flush=True)
    elif command == "sweep":
        print(engine.sweep(), flush=True)
    else:
        sys.exit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
