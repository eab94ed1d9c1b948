"""How long a pooled database connection may be waited for (the backend is agentops/db/).

After a Postgres restart, or while it is down, taking a connection from the pool waits up to
the pool's `timeout` (30 s) for one. A request may wait that long; a periodic sweep must not:
it is what brings runs back once the database is up again, and a sweep stuck for 30 s on a
pool that cannot connect delays every run it would have re-sent. `fail_fast` makes the
checkouts inside it give up after a few seconds, so the sweep fails fast and tries again.
"""

import contextlib
import contextvars
from collections.abc import Iterator

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
