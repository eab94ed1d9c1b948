"""The Celery app as a worker process of the crash tests loads it: the product's app, plus
the test agent and tools (so `celery -A tests.runs.worker_app worker` can run test runs)."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
django.setup()

from agentops.celery import app  # noqa: E402

from . import harness  # noqa: E402

harness.register_agent()
harness.kill_process_after(os.environ.get("TEST_KILL_AFTER_TOOL"))

__all__ = ["app"]
