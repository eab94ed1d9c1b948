"""Run by tests/test_pgbouncer.py with DATABASE_URL pointing at PgBouncer (transaction mode)
and DATABASE_PGBOUNCER=true: reads the pages and exports that hold a connection longest,
and prints what they answered as JSON."""

import json
import os
import sys

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.test import Client  # noqa: E402

from runs.models import Run  # noqa: E402

settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
run_id, username = sys.argv[1], sys.argv[2]
client = Client()
client.force_login(get_user_model().objects.get(username=username))
export = client.get(f"/runs/{run_id}/export.jsonl")
lines = b"".join(export.streaming_content).decode().splitlines()
decisions = client.get("/approvals/export/", {"download": "1", "format": "jsonl"})
body = b"".join(decisions.streaming_content) if decisions.streaming else decisions.content
print(
    json.dumps(
        {
            "cursors_off": settings.DATABASES["default"].get("DISABLE_SERVER_SIDE_CURSORS"),
            "export": export.status_code,
            "export_lines": len(lines),
            "queue": client.get("/approvals/").status_code,
            "stats": client.get("/approvals/stats/").status_code,
            "decisions_export": decisions.status_code,
            "chain": list(Run.objects.get(pk=run_id).verify_chain()),
        }
    )
)
