"""Django's Postgres backend, with a pool that checks a connection only when it may be dead.
Why and how: docs/design/modules.md."""

import logging
import select
import threading
import time
import weakref

from django.core.exceptions import ImproperlyConfigured
from django.db.backends.base.base import NO_DB_ALIAS
from django.db.backends.postgresql import base, operations
from psycopg_pool import ConnectionPool
from psycopg_pool.pool import AddConnection, MaintenanceTask, ReturnConnection

from agentkit.database import checkout_timeout

log = logging.getLogger("agentops.db")

# A connection not handed out for this long is checked with a query before use. Longer than
# the pauses between a busy process's checkouts, far shorter than the minutes after which
# firewalls and NATs forget idle connections.
CHECK_AFTER_IDLE_SECONDS = 30.0

# The longest pause between two attempts to make a connection the pool lacks. While Postgres
# is down each missing connection costs an attempt this often (a refused TCP connect: nothing);
# once it is back the pool is whole again within this long.
RECONNECT_DELAY_MAX_SECONDS = 2.0


def check_if_in_doubt(conn) -> None:
    """psycopg_pool's `check` callback: raise if the connection is dead, cheaply.

    No round trip for a connection handed out less than CHECK_AFTER_IDLE_SECONDS ago whose
    socket has nothing to read; psycopg_pool's own query check otherwise. The pool discards
    a connection that fails and tries the next one (or a new one).
    """
    now = time.monotonic()
    last = getattr(conn, "_handed_out_at", None)
    conn._handed_out_at = now
    if last is not None and now - last < CHECK_AFTER_IDLE_SECONDS and not _readable(conn):
        return
    try:
        ConnectionPool.check_connection(conn)
    except Exception:
        # Dead: so, most likely, is every connection idle beside it (a restart ends them all).
        # Without this each is found by a later checkout, which psycopg_pool makes pause 1, 2,
        # 4 ... s after each dead one: a quiet process's checkouts (a sweep's, an approver's
        # list) ran out of time on them one after the other.
        pool = getattr(conn, "_pool", None)
        if isinstance(pool, Pool):
            pool.check()
        raise


def _readable(conn) -> bool:
    # poll, not select: a worker with hundreds of threads has descriptors past select's 1024.
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN)
    return bool(poller.poll(0))


class Pool(ConnectionPool):
    def schedule_task(self, task: MaintenanceTask, delay: float) -> None:
        """A connection attempt that failed is tried again at most RECONNECT_DELAY_MAX_SECONDS
        later, not after psycopg_pool's doubling backoff (its `attempt`'s delay doubles from
        the value capped here). It still gives up after the pool's reconnect_timeout."""
        if isinstance(task, AddConnection) and task.attempt is not None:
            task.attempt.delay = min(task.attempt.delay, RECONNECT_DELAY_MAX_SECONDS)
            delay = task.attempt.delay
        super().schedule_task(task, delay)

    def checked_out(self) -> int:
        """Connections handed out and not given back (with the ones being made, which a
        pool that lacks them is retrying): 0 in a process at rest."""
        stats = self.get_stats()
        return stats["pool_size"] - stats.get("pool_available", 0)

    def getconn(self, timeout: float | None = None):
        """The pool's checkout, waiting no longer than `agentkit.database.fail_fast` says when
        inside it (a sweep), else the pool's own timeout (a request)."""
        if timeout is None:
            timeout = checkout_timeout.get()
        return super().getconn(timeout=timeout)


# This thread's guards, one per database alias: dropped by Python when the thread ends.
_guards = threading.local()


class _Guard:
    """Lives in the checking-out thread's thread-local storage, with a finalizer that gives the
    connection back if the thread ends while its Django connection still holds it."""


def _give_back(wrapper: "DatabaseWrapper", conn, pool: ConnectionPool) -> None:
    if wrapper.connection is not conn:
        return  # given back as usual, or never kept
    wrapper.connection = None
    log.warning(
        "a thread ended with a database connection checked out (a request cancelled while its"
        " view ran); it is given back to the pool"
    )
    # In a pool worker, not here: the thread is being torn down, and a connection still in a
    # transaction is rolled back first (network I/O).
    pool.run_task(ReturnConnection(pool, conn, from_getconn=False))


def _guard(wrapper: "DatabaseWrapper", conn, pool: ConnectionPool) -> None:
    guard = _Guard()
    finalizer = weakref.finalize(guard, _give_back, wrapper, conn, pool)
    finalizer.atexit = False  # a process exiting closes its sockets anyway
    if not hasattr(_guards, "by_alias"):
        _guards.by_alias = {}
    previous = _guards.by_alias.get(wrapper.alias)
    if previous is not None:
        # Only the thread's end may give a connection back: in a sync thread the previous
        # connection was given back already (one Django connection per thread and alias),
        # but on an event loop's thread Django keeps one per context, and the previous one
        # may still be in use there.
        previous[1].detach()
    _guards.by_alias[wrapper.alias] = (guard, finalizer)


class DatabaseOperations(operations.DatabaseOperations):
    def execute_sql_flush(self, sql_list: list[str]) -> None:
        """`flush` (what the test suite runs between transactional tests) empties every table
        with TRUNCATE, which the audit trail's triggers refuse (runs/migrations/0013). Inside
        flush's own transaction the triggers are turned off, which only a superuser may do:
        the application's role (`manage.py audit_grants`) gets an error instead."""
        if any(sql.lstrip().upper().startswith("TRUNCATE") for sql in sql_list):
            sql_list = ["SET LOCAL session_replication_role = replica", *sql_list]
        super().execute_sql_flush(sql_list)


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations

    def get_new_connection(self, conn_params):
        connection = super().get_new_connection(conn_params)
        if self.pool is not None:
            _guard(self, connection, self.pool)
        return connection

    @property
    def pool(self):
        """Django 5.2's pool, built the same way except for the `check` callback (Django
        passes its own and refuses one in the pool options)."""
        pool_options = self.settings_dict["OPTIONS"].get("pool")
        if self.alias == NO_DB_ALIAS or not pool_options:
            return None
        if self.alias not in self._connection_pools:
            if self.settings_dict.get("CONN_MAX_AGE", 0) != 0:
                raise ImproperlyConfigured("Pooling doesn't support persistent connections.")
            if pool_options is True:
                pool_options = {}
            connect_kwargs = self.get_connection_params()
            connect_kwargs["autocommit"] = True  # Django sets the real mode later
            pool = Pool(
                kwargs=connect_kwargs,
                open=False,  # opened on first use, not at start-up
                configure=self._configure_connection,
                check=check_if_in_doubt if self.settings_dict["CONN_HEALTH_CHECKS"] else None,
                **pool_options,
            )
            # The first thread to build a pool wins; the others' are never opened.
            self._connection_pools.setdefault(self.alias, pool)
        return self._connection_pools[self.alias]
