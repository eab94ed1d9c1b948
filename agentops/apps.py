"""The project package as a Django app: its management commands (up, seed_demo, audit_grants)
and the start-up wiring below. Its one model is the API's idempotency record
(agentops/idempotency.py)."""

import logging

from django.apps import AppConfig
from django.conf import settings

from agentkit import logs

from . import telemetry


class AgentopsConfig(AppConfig):
    name = "agentops"

    def ready(self) -> None:
        logs.connect_celery_signals()
        if settings.LOG_FORMAT == "json":
            # A library's warning (Celery's about a worker run as root) is a log record,
            # not text printed between the JSON lines (Django no longer does this itself).
            logging.captureWarnings(True)
        # Before the first request's middleware chain is built: Django's instrumentation
        # adds a middleware of its own.
        telemetry.start_if_configured()
        from . import metrics_server  # reads the models: once they are loaded

        metrics_server.connect_worker_signals()
