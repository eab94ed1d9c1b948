"""The tools' circuit breaker, shared by every worker process through Redis.
Why and how: docs/design/modules.md."""

import logging
import threading
import time

import redis
from django.conf import settings

from agentkit import redis_target

log = logging.getLogger("agentops.tools")

CACHE_SECONDS = 0.5  # how stale one process's view of the shared state may be
REDIS_TIMEOUT_SECONDS = 0.5
KEY_PREFIX = "agentops:circuit:"
FAILURES_TTL_SECONDS = 600  # a count nobody adds to for this long starts again


class CircuitBreaker:
    def __init__(self, threshold: int = 5, cooldown: float = 30.0, *, shared: bool | None = None):
        self.threshold = threshold
        self.cooldown = cooldown
        self._shared = shared
        self._lock = threading.Lock()
        self._client: redis.Redis | None = None
        # This process's own state (embedded, or Redis not answering).
        self._failures: dict[str, int] = {}
        self._open_until: dict[str, float] = {}
        # The shared state as last read: tool -> (read at, open until, failures).
        self._seen: dict[str, tuple[float, float, int]] = {}
        self._warned_at = 0.0

    # --- the breaker -----------------------------------------------------------------------
    def allow(self, name: str) -> bool:
        now = time.monotonic()
        client = self._redis()
        if client is not None:
            try:
                return now >= self._shared_view(client, name, now)[0]
            except redis.RedisError as exc:
                self._fell_back(exc)
        with self._lock:
            return now >= self._open_until.get(name, 0.0)

    def record(self, name: str, *, ok: bool) -> None:
        client = self._redis()
        if client is not None:
            try:
                self._record_shared(client, name, ok=ok)
                return
            except redis.RedisError as exc:
                self._fell_back(exc)
        with self._lock:
            if ok:
                self._failures.pop(name, None)
                self._open_until.pop(name, None)
                return
            count = self._failures.get(name, 0) + 1
            self._failures[name] = count
            if count >= self.threshold:
                self._open_until[name] = time.monotonic() + self.cooldown

    def reset(self) -> None:
        with self._lock:
            self._failures.clear()
            self._open_until.clear()
            self._seen.clear()
        client = self._redis()
        if client is not None:
            try:
                keys = list(client.scan_iter(f"{KEY_PREFIX}*"))
                if keys:
                    client.delete(*keys)
            except redis.RedisError as exc:
                self._fell_back(exc)

    # --- shared state ----------------------------------------------------------------------
    def _shared_view(self, client: redis.Redis, name: str, now: float) -> tuple[float, int]:
        """(open until, failures) as Redis said at most CACHE_SECONDS ago."""
        seen = self._seen.get(name)
        if seen is not None and now - seen[0] < CACHE_SECONDS:
            return seen[1], seen[2]
        pipe = client.pipeline(transaction=False)
        pipe.pttl(_key(name, "open"))
        pipe.get(_key(name, "failures"))
        ttl_ms, failures = pipe.execute()
        open_until = now + ttl_ms / 1000 if ttl_ms and ttl_ms > 0 else 0.0
        self._seen[name] = (now, open_until, int(failures or 0))
        return open_until, int(failures or 0)

    def _record_shared(self, client: redis.Redis, name: str, *, ok: bool) -> None:
        now = time.monotonic()
        if ok:
            # Most calls succeed with nothing counted: no write for them.
            open_until, failures = self._shared_view(client, name, now)
            if failures or open_until > now:
                client.delete(_key(name, "failures"), _key(name, "open"))
                self._seen[name] = (now, 0.0, 0)
            return
        pipe = client.pipeline(transaction=False)
        pipe.incr(_key(name, "failures"))
        pipe.expire(_key(name, "failures"), FAILURES_TTL_SECONDS)
        count = pipe.execute()[0]
        open_until = 0.0
        if count >= self.threshold:
            client.set(_key(name, "open"), "1", px=int(self.cooldown * 1000))
            open_until = now + self.cooldown
        self._seen[name] = (now, open_until, count)

    def _redis(self) -> redis.Redis | None:
        shared = self._shared if self._shared is not None else bool(settings.REDIS_URL)
        if not shared or not settings.REDIS_URL:
            return None
        if self._client is None:
            self._client = redis_target.client(
                settings.REDIS_URL,
                socket_timeout=REDIS_TIMEOUT_SECONDS,
                socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
            )
        return self._client

    def _fell_back(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._warned_at > 60:
            self._warned_at = now
            log.warning("circuit breaker: Redis unavailable (%s); using this process's state", exc)


def _key(name: str, part: str) -> str:
    return f"{KEY_PREFIX}{name}:{part}"
