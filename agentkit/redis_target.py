"""Where Redis is: one REDIS_URL, a plain server or a Sentinel-watched primary.
No Django import: settings.py reads it before Django is configured.
Why and how: docs/design/modules.md."""

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import redis
from redis.sentinel import Sentinel

SENTINEL_SCHEME = "sentinel"
DEFAULT_SENTINEL_PORT = 26379


class RedisURLError(ValueError):
    pass


@dataclass(frozen=True)
class SentinelTarget:
    sentinels: tuple[tuple[str, int], ...]
    master: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_password: str | None = None

    def sentinel_kwargs(self) -> dict[str, Any]:
        """Connection arguments for the sentinels themselves (their `requirepass`)."""
        return {"password": self.sentinel_password} if self.sentinel_password else {}

    def master_kwargs(self) -> dict[str, Any]:
        """Connection arguments for the primary (not for the sentinels)."""
        kwargs: dict[str, Any] = {"db": self.db}
        if self.username:
            kwargs["username"] = self.username
        if self.password:
            kwargs["password"] = self.password
        return kwargs

    def channel_layer_host(self) -> dict[str, Any]:
        """One entry of channels-redis's `hosts`: it asks the sentinels for the primary."""
        # socket_timeout None: idle consumers must not be dropped after 5 s
        # (django/channels_redis#422).
        return {
            "sentinels": list(self.sentinels),
            "master_name": self.master,
            **self.master_kwargs(),
            "socket_timeout": None,
            **({"sentinel_kwargs": self.sentinel_kwargs()} if self.sentinel_password else {}),
        }

    def redbeat_options(self) -> dict[str, Any]:
        """celery-redbeat's redbeat_redis_options for its redis-sentinel:// mode."""
        return {
            "sentinels": list(self.sentinels),
            "service_name": self.master,
            **self.master_kwargs(),
            **({"sentinel_kwargs": self.sentinel_kwargs()} if self.sentinel_password else {}),
        }

    def kombu_transport_options(self) -> dict[str, Any]:
        """What kombu's Sentinel transport needs besides its URL."""
        options: dict[str, Any] = {"master_name": self.master}
        if self.sentinel_password:
            options["sentinel_kwargs"] = self.sentinel_kwargs()
        return options

    def kombu_url(self) -> str:
        """kombu's form: one `sentinel://` URL per sentinel, `;`-separated; the master's
        name goes in broker_transport_options["master_name"]."""
        auth = ""
        if self.username or self.password:
            auth = f"{quote(self.username or '', safe='')}:{quote(self.password or '', safe='')}@"
        return ";".join(
            f"sentinel://{auth}{host}:{port}/{self.db}" for host, port in self.sentinels
        )

    def redbeat_url(self) -> str:
        """celery-redbeat takes the sentinels from its options; the URL only names the mode."""
        return f"redis-sentinel://{self.sentinels[0][0]}:{self.sentinels[0][1]}/{self.db}"


def parse_sentinel_url(url: str) -> SentinelTarget | None:
    """The Sentinel target a REDIS_URL names, or None for a plain redis:// / rediss:// URL."""
    if not url.startswith(f"{SENTINEL_SCHEME}://"):
        return None
    rest, _, query = url[len(SENTINEL_SCHEME) + 3 :].partition("?")
    options = parse_qs(query, keep_blank_values=True)
    unknown = set(options) - {"sentinel_password"}
    if unknown:
        raise RedisURLError(f"REDIS_URL: unknown sentinel:// options {sorted(unknown)}")
    # urlsplit cannot take a comma-separated host list with ports: split it by hand.
    credentials, _, location = rest.rpartition("@")
    hosts_part, _, path = location.partition("/")
    sentinels = []
    for entry in hosts_part.split(","):
        entry = entry.strip()
        if not entry:
            continue
        parsed = urlsplit(f"//{entry}")
        try:
            port = parsed.port or DEFAULT_SENTINEL_PORT
        except ValueError as exc:
            raise RedisURLError(f"REDIS_URL: bad sentinel address {entry!r}") from exc
        if not parsed.hostname:
            raise RedisURLError(f"REDIS_URL: bad sentinel address {entry!r}")
        sentinels.append((parsed.hostname, port))
    if not sentinels:
        raise RedisURLError("REDIS_URL: a sentinel:// URL lists at least one sentinel host:port")
    parts = [p for p in path.split("/") if p]
    if not parts or len(parts) > 2:
        raise RedisURLError(
            "REDIS_URL: a sentinel:// URL ends with /<master name>[/<db>], "
            "e.g. sentinel://s1:26379,s2:26379/mymaster/0"
        )
    master = unquote(parts[0])
    db = 0
    if len(parts) == 2:
        if not parts[1].isdigit():
            raise RedisURLError(f"REDIS_URL: the database must be a number, not {parts[1]!r}")
        db = int(parts[1])
    username = password = None
    if credentials:
        user, has_password, secret = credentials.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if has_password and secret else None
    return SentinelTarget(
        sentinels=tuple(sentinels),
        master=master,
        db=db,
        username=username,
        password=password,
        sentinel_password=options.get("sentinel_password", [""])[-1] or None,
    )


def client(url: str, **kwargs: Any) -> redis.Redis:
    """A redis-py client for REDIS_URL; `kwargs` as for `redis.Redis` (timeouts...).

    Given a sentinel:// URL, a client of the current primary: its connections ask the
    sentinels where the primary is whenever they (re)connect, so after a failover a
    command that failed on the old primary succeeds on the next attempt."""
    target = parse_sentinel_url(url)
    if target is None:
        return redis.Redis.from_url(url, **kwargs)
    # The sentinels answer within the same timeouts as the primary.
    sentinel_kwargs = {k: v for k, v in kwargs.items() if k.startswith("socket_")}
    sentinel_kwargs.update(target.sentinel_kwargs())
    # redis-py 7's sentinel module has no annotations.
    sentinel = Sentinel(list(target.sentinels), sentinel_kwargs=sentinel_kwargs)  # type: ignore[no-untyped-call]
    master: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call]
        target.master, **target.master_kwargs(), **kwargs
    )
    return master
