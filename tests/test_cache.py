"""The shared cache (agentops/cache.py): with Redis, every process sees one cache."""

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.core.cache import cache

pytestmark = pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL=redis://…")

ROOT = Path(__file__).resolve().parent.parent


def test_a_value_one_process_caches_is_read_by_another():
    key = f"shared-{uuid.uuid4().hex}"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "agentops.settings"}
    script = (
        "import django; django.setup()\n"
        "from django.core.cache import cache\n"
        f"cache.set({key!r}, '12.50', timeout=60)\n"
    )
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, check=True, timeout=120)

    assert cache.get(key) == "12.50"


def test_clearing_it_keeps_the_broker_s_keys():
    client = redis.Redis.from_url(settings.REDIS_URL)
    other = f"not-the-cache-{uuid.uuid4().hex}"
    client.set(other, "queued run", ex=60)
    cache.set("cleared", 1)
    try:
        cache.clear()
        assert cache.get("cleared") is None
        assert client.get(other) == b"queued run"
    finally:
        client.delete(other)
        client.close()
