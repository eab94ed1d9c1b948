"""The database slow or down: how long a pooled connection may be waited for, and what a client
is told meanwhile (the backend itself is agentops/db/).

After a Postgres restart, or while it is down, taking a connection from the pool waits up to
the pool's `timeout` (30 s) for one. A request may wait that long; a periodic sweep must not:
it is what brings runs back once the database is up again, and a sweep stuck for 30 s on a
pool that cannot connect delays every run it would have re-sent. `fail_fast` makes the
checkouts inside it give up after a few seconds, so the sweep fails fast and tries again.
"""

import contextlib
import contextvars
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

# Read by agentops/db/postgresql/base.py's pool on each checkout; None: the pool's own.
checkout_timeout: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "checkout_timeout", default=None
)


@contextlib.contextmanager
def fail_fast(seconds: float) -> Iterator[None]:
    """Pooled connections checked out inside wait at most `seconds` for one."""
    token = checkout_timeout.set(seconds)
    try:
        yield
    finally:
        checkout_timeout.reset(token)


# What a client is told when the database is down, and when to retry: the project's middleware
# (agentops/middleware.py) and the gateway's waits (gateway/waits.py) answer alike.
DATABASE_DOWN_MESSAGE = "the database is unavailable; retry in a few seconds"
DATABASE_RETRY_AFTER_SECONDS = 5


def any_thread(fn: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    """`fn` for async code (WebSocket consumers), run on any thread of the event loop's
    executor, its database connection given back to the pool after the call.

    channels' `database_sync_to_async` defaults to asgiref's thread_sensitive mode: every
    call of every socket of the process queues on one thread. A reconnect storm (a thousand
    browsers back at once after a deploy) then waited there past daphne's handshake timeout
    and no socket was accepted (bench/reconnect_storm.py). Nothing a consumer reads needs
    that one thread: each call opens and closes its own connection."""
    from channels.db import database_sync_to_async

    wrapped: Callable[..., Awaitable[T]] = database_sync_to_async(fn, thread_sensitive=False)
    return wrapped


def in_batches(rows: Any, *, by: tuple[str, ...] = ("pk",), size: int = 500) -> Iterator[Any]:
    """Every row of the queryset `rows` in the ascending order of `by` (one or two fields
    that together are unique), `size` at a time, each batch a query of its own starting
    after the last row of the one before.

    Memory stays flat as with `.iterator()`'s server-side cursor, and it also works behind
    PgBouncer in transaction mode, where a cursor's session is not kept between fetches."""
    from django.db.models import Q

    if len(by) not in (1, 2):
        raise ValueError("in_batches orders by one or two fields")
    ordered = rows.order_by(*by)
    last: tuple[Any, ...] | None = None
    while True:
        page = ordered
        if last is not None:
            after = Q(**{f"{by[0]}__gt": last[0]})
            if len(by) == 2:
                after |= Q(**{by[0]: last[0], f"{by[1]}__gt": last[1]})
            page = ordered.filter(after)
        batch = list(page[:size])
        yield from batch
        if len(batch) < size:
            return
        final = batch[-1]
        last = tuple(
            final[name] if isinstance(final, dict) else getattr(final, name) for name in by
        )
