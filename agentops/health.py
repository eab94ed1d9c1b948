"""GET /healthz for load balancers and `manage.py up`: can this process reach its database
and its broker? No auth, no session, no CSRF; 200 when both answer, 503 naming what failed."""

import logging

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from agentkit import redis_target
from agentops.celery import app

log = logging.getLogger("agentops.health")

BROKER_TIMEOUT_SECONDS = 2.0


def check_database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def check_broker() -> None:
    """Redis answers PING and Celery's own connection opens; the memory transport of the
    embedded mode lives in this process, so opening it is the whole check."""
    if settings.REDIS_URL:
        client = redis_target.client(
            settings.REDIS_URL,
            socket_timeout=BROKER_TIMEOUT_SECONDS,
            socket_connect_timeout=BROKER_TIMEOUT_SECONDS,
        )
        try:
            client.ping()
        finally:
            client.close()

    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, interval_start=0, timeout=BROKER_TIMEOUT_SECONDS)


CHECKS = {"database": check_database, "broker": check_broker}


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    results: dict[str, str] = {}
    for name, check in CHECKS.items():
        try:
            check()
            results[name] = "ok"
        except Exception as exc:
            # A health check reports failures; it must never become one (no 500).
            log.warning("healthz: %s check failed: %s", name, exc)
            results[name] = f"error: {type(exc).__name__}"
    ok = all(value == "ok" for value in results.values())
    return JsonResponse({"ok": ok, **results}, status=200 if ok else 503)
