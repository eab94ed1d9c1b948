"""Django's Postgres backend, with a pool that checks a connection only when it may be dead.

Django's CONN_HEALTH_CHECKS gives psycopg_pool `check=ConnectionPool.check_connection`: an
empty query on every checkout. A worker checks a connection out for each engine step, so that
was a round trip (and a commit in pg_stat_database) per step, ~25 % of the engine's steps/s
(bench/engine_throughput.py). What the check is for is a Postgres restart, which leaves every
pooled connection dead. The server says so on the socket before it goes: it sends a FATAL
and closes, so an idle connection whose socket has something to read has been ended (or got
a notice nobody asked for); one that reads nothing is alive as far as the network knows. So
this pool checks a connection with a query only when its socket is readable, or when it was
not handed out for a while (a peer that vanished without closing, a firewall that forgot
the connection: the socket says nothing then). tests/test_database.py restarts a Postgres.
"""

import select
import time

from django.core.exceptions import ImproperlyConfigured
from django.db.backends.base.base import NO_DB_ALIAS
from django.db.backends.postgresql import base, operations
from psycopg_pool import ConnectionPool

from agentkit.database import checkout_timeout

# A connection not handed out for this long is checked with a query before use. Longer than
# the pauses between a busy process's checkouts, far shorter than the minutes after which
# firewalls and NATs forget idle connections.
CHECK_AFTER_IDLE_SECONDS = 30.0


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
    ConnectionPool.check_connection(conn)


def _readable(conn) -> bool:
    # poll, not select: a worker with hundreds of threads has descriptors past select's 1024.
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN)
    return bool(poller.poll(0))


class Pool(ConnectionPool):
    def getconn(self, timeout: float | None = None):
        """The pool's checkout, waiting no longer than `agentkit.database.fail_fast` says when
        inside it (a sweep), else the pool's own timeout (a request)."""
        if timeout is None:
            timeout = checkout_timeout.get()
        return super().getconn(timeout=timeout)


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
