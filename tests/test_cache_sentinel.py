"""The shared cache connects through the one Redis factory, so a Sentinel REDIS_URL works for
it as for the broker and the channel layer (agentops/cache.py, agentkit/redis_target.py)."""

from agentkit import redis_target
from agentops.cache import PrefixedRedisCache

URL = "sentinel://127.0.0.1:26379,127.0.0.1:26380/agentops/2"


def test_a_sentinel_url_gives_the_cache_the_factory_s_client(monkeypatch):
    made = []
    monkeypatch.setattr(redis_target, "client", lambda url: made.append(url) or "the primary")
    cache = PrefixedRedisCache(URL, {"KEY_PREFIX": "test"})
    assert cache._cache.get_client(write=True) == "the primary"
    assert cache._cache.get_client() == "the primary"
    assert made == [URL]  # one client, made once


def test_a_plain_url_keeps_django_s_own_client():
    cache = PrefixedRedisCache("redis://127.0.0.1:6379/3", {"KEY_PREFIX": "test"})
    assert type(cache._cache).__name__ == "RedisCacheClient"
