"""The shared cache: Django's Redis backend, whose `clear()` empties only its own keys.

The cache lives in `REDIS_URL`'s database next to the broker's queues and the channel layer's
groups; Django's `RedisCache.clear()` is a FLUSHDB, which would drop every queued run with the
cached values. Here it deletes the keys under the cache's `KEY_PREFIX` and nothing else.
Imports nothing of the apps.
"""

from __future__ import annotations

from typing import Any

import redis
from django.core.cache.backends.redis import RedisCache, RedisCacheClient

from agentkit import redis_target


class _SentinelCacheClient(RedisCacheClient):
    """Django's client, connected through the one Redis factory: a `sentinel://` REDIS_URL
    (agentkit/redis_target.py) follows the primary across a failover."""

    def __init__(self, servers: list[str], **options: Any) -> None:
        super().__init__(servers, **options)
        self._url = servers[0]
        self._target: redis.Redis | None = None

    def get_client(self, key: Any = None, *, write: bool = False) -> redis.Redis:
        if self._target is None:
            self._target = redis_target.client(self._url)
        return self._target


class PrefixedRedisCache(RedisCache):
    def __init__(self, server: str, params: dict) -> None:
        super().__init__(server, params)
        if not self.key_prefix:
            raise ValueError("PrefixedRedisCache needs a KEY_PREFIX: clear() deletes by it")
        if redis_target.parse_sentinel_url(server) is not None:
            # One URL naming its sentinels, which Django would split at their commas.
            self._servers = [server]
            self._class = _SentinelCacheClient

    def clear(self) -> None:
        client = self._cache.get_client(write=True)
        # Django's key function writes "<prefix>:<version>:<key>"; a prefix's glob characters
        # are escaped so that it matches itself only.
        prefix = "".join(f"\\{c}" if c in "*?[]\\" else c for c in self.key_prefix)
        batch: list[bytes] = []
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            batch.append(key)
            if len(batch) == 1000:
                client.delete(*batch)
                batch = []
        if batch:
            client.delete(*batch)
