"""One REDIS_URL, a plain server or a Sentinel-watched primary (agentkit/redis_target.py): the
URL's parse, and a real failover (a primary, a replica, three sentinels of the test's own; the
primary killed by PID) that the direct clients, the Celery broker and the channel layer follow.
"""

import asyncio
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery
from channels_redis.core import RedisChannelLayer
from django.conf import settings
from kombu import Connection
from redbeat.schedulers import get_redis

from agentkit import redis_target
from runs import events
from tests.support.redis_sentinel import SentinelGroup

FAILOVER_SECONDS = 45  # detection (1 s) + election + promotion: seconds; bounded generously


def test_a_plain_url_is_a_plain_client():
    client = redis_target.client("redis://cache.internal:6380/4", socket_timeout=2)
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("cache.internal", 6380, 4)
    assert kwargs["socket_timeout"] == 2
    assert redis_target.parse_sentinel_url("redis://cache.internal:6380/4") is None
    assert redis_target.parse_sentinel_url("rediss://cache.internal:6380/4") is None


def test_a_sentinel_url_names_the_sentinels_the_master_and_the_database():
    target = redis_target.parse_sentinel_url("sentinel://agent:p%2Fw@s1,s2:26380/mymaster/5")
    assert target == redis_target.SentinelTarget(
        sentinels=(("s1", 26379), ("s2", 26380)),
        master="mymaster",
        db=5,
        username="agent",
        password="p/w",
    )
    assert redis_target.parse_sentinel_url("sentinel://s1/mymaster").db == 0
    guarded = redis_target.parse_sentinel_url("sentinel://s1/mymaster?sentinel_password=s%26x")
    assert guarded.sentinel_password == "s&x"
    assert guarded.password is None
    assert guarded.kombu_transport_options()["sentinel_kwargs"] == {"password": "s&x"}
    assert guarded.channel_layer_host()["sentinel_kwargs"] == {"password": "s&x"}
    assert guarded.redbeat_options()["sentinel_kwargs"] == {"password": "s&x"}
    # The password round-trips through kombu's URL form.
    assert target.kombu_url().startswith("sentinel://agent:p%2Fw@s1:26379/5;")


def test_a_sentinel_url_is_refused_by_redis_py_itself():
    # Why the factory exists: every direct client built with from_url would fail to start.
    with pytest.raises(ValueError):
        redis.Redis.from_url("sentinel://s1:26379/mymaster/0")


def test_a_sentinel_client_asks_for_the_primary_by_name():
    client = redis_target.client("sentinel://s1:26379/mymaster/3", socket_timeout=2)
    pool = client.connection_pool
    assert pool.service_name == "mymaster"
    assert pool.connection_kwargs["db"] == 3
    assert pool.connection_kwargs["socket_timeout"] == 2


@pytest.mark.parametrize(
    "url",
    [
        "sentinel://s1",
        "sentinel:///m/0",
        "sentinel://s1:x/m",
        "sentinel://s1/m/db",
        "sentinel://s1/m?sentinel_pasword=typo",
    ],
)
def test_a_malformed_sentinel_url_is_refused(url):
    with pytest.raises(redis_target.RedisURLError):
        redis_target.parse_sentinel_url(url)


# --- a real failover -------------------------------------------------------------------------
@pytest.fixture
def group(request) -> Iterator[SentinelGroup]:
    group = SentinelGroup(**getattr(request, "param", {}))
    try:
        group.start()
        yield group
    finally:
        group.stop()


def retry_until(action: Callable[[], object], what: str) -> float:
    """Runs `action` until it stops raising a Redis or broker error; seconds it took."""
    started = time.monotonic()
    while True:
        try:
            action()
            return time.monotonic() - started
        except (redis.RedisError, OSError, ConnectionError) as exc:
            if time.monotonic() - started > FAILOVER_SECONDS:
                raise AssertionError(f"{what}: still failing after the failover: {exc}") from exc
            time.sleep(0.2)


def fail_over(group: SentinelGroup) -> None:
    old = group.primary_address()
    group.kill_primary()
    retry_until(lambda: _assert_moved(group, old), "the sentinels' primary")


def _assert_moved(group: SentinelGroup, old: tuple[str, int]) -> None:
    if group.primary_address() == old:
        raise ConnectionError("the sentinels still name the killed primary")


@pytest.mark.parametrize(
    "group",
    [{}, {"sentinel_password": "sentinel-secret"}, {"password": "primary-secret"}],
    indirect=True,
    ids=["open", "sentinel-password", "primary-password"],
)
def test_the_factory_client_writes_again_after_the_primary_is_killed(group):
    client = redis_target.client(group.url(db=2), socket_timeout=1, socket_connect_timeout=1)
    client.set("before", "1")
    assert client.wait(1, 5000) == 1  # on the replica before the primary dies
    assert client.connection_pool.get_master_address()[1] == group.primary_port

    group.kill_primary()
    # The same client, retried: its connections ask the sentinels again on reconnect.
    retry_until(lambda: client.set("after", "2"), "a write through the factory's client")

    assert client.connection_pool.get_master_address()[1] == group.replica_port
    assert client.get("before") == b"1"
    fresh = redis_target.client(group.url(db=2), socket_timeout=1)
    assert fresh.get("after") == b"2"
    assert fresh.info("replication")["role"] == "master"


@pytest.mark.parametrize(
    "group", [{}, {"password": "primary-secret"}], indirect=True, ids=["open", "primary-password"]
)
def test_the_celery_broker_delivers_after_the_primary_is_killed(group):
    target = redis_target.parse_sentinel_url(group.url(db=1))
    options = {**target.kombu_transport_options(), "visibility_timeout": 3600}
    queue_name = f"test-failover-{uuid.uuid4().hex}"

    def round_trip(body: dict) -> None:
        with Connection(target.kombu_url(), transport_options=options) as conn:
            queue = conn.SimpleQueue(queue_name)
            try:
                queue.put(body)
                message = queue.get(timeout=2)
                assert message.payload == body
                message.ack()
            finally:
                queue.close()

    round_trip({"n": 1})
    assert type(Connection(target.kombu_url(), transport_options=options).transport).__name__ == (
        "SentinelTransport"
    )
    fail_over(group)
    retry_until(lambda: round_trip({"n": 2}), "a broker round trip")


async def test_the_channel_layer_delivers_after_the_primary_is_killed(group):
    target = redis_target.parse_sentinel_url(group.url(db=3))
    layer = RedisChannelLayer(hosts=[target.channel_layer_host()], expiry=10)

    async def round_trip(text: str) -> None:
        channel = await layer.new_channel()
        await layer.send(channel, {"type": "test.message", "text": text})
        received = await asyncio.wait_for(layer.receive(channel), timeout=3)
        assert received["text"] == text

    await round_trip("before")
    await asyncio.to_thread(fail_over, group)
    started = time.monotonic()
    while True:
        try:
            await round_trip("after")
            break
        except (redis.RedisError, OSError, TimeoutError) as exc:
            if time.monotonic() - started > FAILOVER_SECONDS:
                raise AssertionError(f"the channel layer still fails: {exc}") from exc
            await asyncio.sleep(0.2)
    # runs/events.py counts a group's members through the layer's internals: they hold for a
    # Sentinel-backed layer too.
    listener = await layer.new_channel()
    await layer.group_add("run.watched", listener)
    listened = await events._groups_listened_to(layer, {"run.watched", "run.unwatched"})
    assert listened == {"run.watched"}
    await layer.flush()


def test_beats_lock_store_writes_after_the_primary_is_killed(group):
    """celery-redbeat in its redis-sentinel:// mode, configured as settings.py does."""
    target = redis_target.parse_sentinel_url(group.url(db=4))
    app = Celery("test-redbeat", set_as_current=False)
    app.conf.redbeat_redis_url = target.redbeat_url()
    app.conf.redbeat_redis_options = target.redbeat_options()
    get_redis(app).set("redbeat:test", "before")
    assert get_redis(app).connection_pool.get_master_address()[1] == group.primary_port

    fail_over(group)
    retry_until(lambda: get_redis(app).set("redbeat:test", "after"), "redbeat's store")
    assert get_redis(app).connection_pool.get_master_address()[1] == group.replica_port
    assert get_redis(app).get("redbeat:test") == "after"


def test_every_direct_client_is_built_by_the_factory():
    """A client built with redis.Redis.from_url would refuse a sentinel:// REDIS_URL."""
    root = Path(settings.BASE_DIR)
    packages = ("agentkit", "agentops", "runs", "approvals", "gateway", "triggers", "history")
    offenders = [
        str(path.relative_to(root))
        for package in packages
        for path in (root / package).rglob("*.py")
        if re.search(r"\bRedis(Cluster)?\.from_url\(|\bredis\.Redis\(", path.read_text())
        and path != root / "agentkit" / "redis_target.py"
    ]
    assert offenders == []
