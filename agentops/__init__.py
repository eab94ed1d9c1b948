"""agentops: the project's wiring. Settings, urls, asgi and WebSocket routing, the Celery app,
the embedded mode, `manage.py up` / `seed_demo` / `audit_grants`, middleware, /healthz, the
/metrics view, the Postgres backend and the broker transport.

It may import every app and agentkit; no app imports it, but runs/queue.py sends through its
Celery app (tests/test_layering.py). Building blocks the apps need belong in agentkit/.
"""

from .celery import app as celery_app

__all__ = ["celery_app"]
