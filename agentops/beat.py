"""The beat scheduler: celery-redbeat's leader lock, kept through a Redis outage.

redbeat's own scheduler lets any Redis error out of its tick, and `celery beat` stops on it: a
Redis restart or failover left the fleet with no beat, so no sweep re-sent a dead worker's runs.
Here an error costs the leadership instead: the beat waits, takes the lock again when it can
(another beat may hold it by then) and, holding it, writes the schedule back, since a Redis that
restarted empty lost the schedule with the lock.
"""

import logging
from typing import Any

from redbeat.schedulers import LUA_EXTEND_TO_SCRIPT, RedBeatScheduler, get_redis
from redis.exceptions import RedisError

log = logging.getLogger("agentops.beat")

# How long a beat waits after a Redis error before it tries again.
RETRY_SECONDS = 1.0


class Scheduler(RedBeatScheduler):
    lock: Any  # redis-py's Lock while this beat leads, else None

    def tick(self, min=min, **kwargs) -> float:
        try:
            if self.lock_key and self.lock is None and not self._take_the_lead():
                return self.max_interval  # a standby: another beat holds the lock
            return super().tick(min=min, **kwargs)
        except RedisError as exc:
            if self.lock is not None:
                log.warning("beat: Redis error (%s): leadership dropped until it answers", exc)
            self.lock = None
            return RETRY_SECONDS

    def _take_the_lead(self) -> bool:
        """Take the lock without waiting; holding it, write the static schedule back."""
        client = get_redis(self.app)
        lock = client.lock(self.lock_key, timeout=self.lock_timeout, sleep=self.max_interval)
        # redbeat's extend sets the lock's time to live rather than adding to it
        lock.lua_extend = client.register_script(LUA_EXTEND_TO_SCRIPT)
        if not lock.acquire(blocking=False):
            return False
        self.lock = lock
        self.setup_schedule()
        log.info("beat: leading (lock %s taken)", self.lock_key)
        return True

    def close(self) -> None:
        try:
            super().close()
        except RedisError as exc:  # Redis is down: the lock expires by itself
            log.warning("beat: lock not released (%s)", exc)
            self.lock = None
