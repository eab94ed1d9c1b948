"""The shared cache: Django's Redis backend, whose `clear()` empties only its own keys.

The cache lives in `REDIS_URL`'s database next to the broker's queues and the channel layer's
groups; Django's `RedisCache.clear()` is a FLUSHDB, which would drop every queued run with the
cached values. Here it deletes the keys under the cache's `KEY_PREFIX` and nothing else.
Imports nothing of the apps.
"""

from __future__ import annotations

from django.core.cache.backends.redis import RedisCache


class PrefixedRedisCache(RedisCache):
    def __init__(self, server: str, params: dict) -> None:
        super().__init__(server, params)
        if not self.key_prefix:
            raise ValueError("PrefixedRedisCache needs a KEY_PREFIX: clear() deletes by it")

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
