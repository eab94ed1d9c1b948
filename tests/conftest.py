import contextlib
import os
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.contrib.auth.models import Group

# pytester: the suite's own wiring is tested by running pytest on small test files.
pytest_plugins = ["pytester", "tests.timeouts", "tests.support.failure_reports"]

# What agentops/settings.py hashes passwords with (Django's default: PBKDF2, 1 000 000
# iterations, about 0.4 s of CPU a hash), kept for the one test that signs in with it
# (tests/accounts/test_password_hashing.py); every other test uses FAST_PASSWORD_HASHERS.
PRODUCTION_PASSWORD_HASHERS = list(settings.PASSWORD_HASHERS)
# Weak and fast: the suite creates users and signs in by the hundred, and on a starved runner
# each production hash cost as much CPU as a whole test.
FAST_PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def pytest_configure(config):
    # Django's test client and Channels' communicator call the server "testserver", a name
    # production settings do not allow. Added here, before any test module is imported:
    # agentops.asgi reads ALLOWED_HOSTS once, when it builds its WebSocket origin check.
    if "testserver" not in settings.ALLOWED_HOSTS:
        settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    # Before any test runs, for session fixtures too. A server started as a subprocess
    # (tests/livesupport.py) keeps the production hasher, and makes its own users.
    settings.PASSWORD_HASHERS = FAST_PASSWORD_HASHERS
    _redis_of_this_worker()
    _cache_of_this_session()


def _redis_of_this_worker() -> None:
    """Under pytest-xdist each worker has its own database (pytest-django names it) and, here,
    its own Redis database: the broker queue, the channel layer's global groups (dashboard,
    approvals) and the breaker's keys would otherwise be shared between workers, and one
    worker's Celery consumer would take another's tasks. Worker n uses the URL's database
    number minus n (modulo 16), in this process's settings and in the environment of every
    subprocess it starts. Runs before anything has used Redis: the channel layer and the
    Celery app read their settings on first use."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or not settings.REDIS_URL:
        return
    parts = urlsplit(settings.REDIS_URL)
    base = int(parts.path.strip("/") or 0)
    url = parts._replace(path=f"/{(base - int(worker[2:])) % 16}").geturl()
    os.environ["REDIS_URL"] = settings.REDIS_URL = url
    settings.CELERY_BROKER_URL = url
    for layer in settings.CHANNEL_LAYERS.values():
        for host in layer.get("CONFIG", {}).get("hosts", []):
            host["address"] = url
    settings.CACHES["default"]["LOCATION"] = url


def _cache_of_this_session() -> None:
    """With Redis the cache outlives the test process: a session writes under a prefix of its
    own (as a process's memory cache would start empty), given to its subprocesses too, and
    deletes its keys at the end."""
    if not settings.REDIS_URL:
        return
    prefix = f"test-{uuid.uuid4().hex[:12]}"
    os.environ["AGENTOPS_CACHE_PREFIX"] = settings.CACHES["default"]["KEY_PREFIX"] = prefix


# Test modules whose behaviour depends on the services, run in CI's second pass (Postgres +
# Redis) as well as in the embedded one: row locks and compare-and-set, database triggers and
# the hash chain, full-text search and JSON columns, what Postgres refuses that SQLite takes
# (bad input), the channel layer, the broker, the connection pool. Everything else is the same
# code on either topology and runs once, embedded. Tests that skip without a service are
# added on their own (their skip reason names DATABASE_URL or REDIS_URL).
SERVICE_SENSITIVE = {
    # locks, compare-and-set, constraints
    "approvals/test_concurrency.py",
    "approvals/test_decide.py",
    "approvals/test_batch.py",
    "approvals/test_batch_outcomes.py",
    "approvals/test_decide_finished_run.py",
    "approvals/notify/test_one_tap.py",
    "approvals/test_outcome_unknown.py",
    # an MCP tool through gate, decision and ledger; a preview recomputed under the row lock
    "approvals/test_mcp_gate.py",
    "approvals/test_effect_preview.py",
    "approvals/notify/test_escalation.py",
    "runs/engine/test_race.py",
    "runs/engine/test_ledger.py",
    "runs/engine/test_rate_limits.py",
    "runs/engine/test_pending.py",
    "runs/engine/test_crash_resume.py",
    "runs/test_tasks.py",
    "runs/engine/test_engine.py",
    "runs/engine/test_conversation_length.py",
    "runs/engine/test_budget_check.py",
    "runs/engine/test_tool_cost.py",
    "runs/test_budgets.py",
    "runs/test_budgets_api.py",
    "runs/test_costs.py",
    "runs/test_broker_down.py",
    "triggers/test_races.py",
    "api/test_idempotency_races.py",
    # Idempotency-Key: the advisory lock and unique claim on Postgres, select_for_update
    "api/test_idempotency.py",
    "api/test_idempotency_async.py",
    "triggers/test_webhooks.py",
    "triggers/test_schedules.py",
    # triggers, the hash chain, migrations
    "runs/test_audit_trail.py",
    "runs/test_properties_chain.py",
    "approvals/test_audit_trail.py",
    "history/test_transfer.py",
    "history/test_fork.py",
    # the engine driven inside a transaction rolled back (savepoints, row locks)
    "evals/test_regression.py",
    "test_migrations.py",
    # full-text search, raw SQL, JSON columns, what Postgres refuses
    "runs/test_search.py",
    # keyset cursors: uuid and timestamp comparisons made by the database and in Python
    "runs/test_api_cursors.py",
    "approvals/test_api_cursors.py",
    "runs/test_api.py",
    "runs/test_views.py",
    "runs/test_bad_input.py",
    "approvals/test_api.py",
    "approvals/test_views.py",
    "approvals/test_bad_input.py",
    "approvals/learning/test_rules.py",
    "approvals/learning/test_stats.py",
    # JSON key lookups, a server-side cursor read in chunks while other queries run
    "approvals/test_evidence_export.py",
    "history/test_pages_and_api.py",
    "test_security.py",
    # the channel layer
    "runs/test_consumers.py",
    "runs/test_consumers_bad_input.py",
    "runs/test_consumers_drafts.py",
    "runs/test_consumers_redis.py",
    "runs/test_feeds.py",
    "runs/test_live.py",
    "runs/test_outbox.py",
    "runs/test_revocation.py",
    "runs/engine/test_drafts.py",
    "approvals/test_consumers.py",
    "gateway/test_api.py",
    "gateway/test_callbacks.py",
    # broker, pool, health, metrics across processes
    "test_broker.py",
    "test_circuit.py",
    "test_database.py",
    "test_health.py",
    "test_metrics.py",
    # traces: psycopg's spans, the Celery message's headers through Redis
    "runs/test_traces.py",
    "test_telemetry.py",
}
TESTS_DIR = Path(__file__).resolve().parent

# The modules that drive tests/gateway's package-scoped live server: one xdist work unit, so
# one worker starts that server instead of each worker that draws one of them.
GATEWAY_LIVE_SERVER = {
    "tests/gateway/test_adapters.py",
    "tests/gateway/test_client.py",
    "tests/gateway/test_mcp_proxy.py",
    "tests/gateway/test_mcp_proxy_tasks.py",
}
# Work units of few tests that take long (servers, subprocesses, migrations, thousands of
# generated cases), handed out first. xdist otherwise hands out the units with the most tests
# first, which left these for the end of the run, with the other workers idle.
LONG_FIRST = [
    "tests/test_fleet.py",  # a whole fleet started and broken: minutes (services pass only)
    "tests/gateway (live server)",
    "tests/test_migrations.py",
    "tests/history/test_transfer.py",
    "tests/test_up.py",
    "tests/approvals/learning/test_simulation.py",
    "tests/test_layering.py",
    "tests/runs/engine/test_crash_resume.py",
    "tests/test_settings.py",
    "tests/test_pool_restarts.py",
]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LongFirstLoadFileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = super()._split_scope(nodeid)
            return "tests/gateway (live server)" if module in GATEWAY_LIVE_SERVER else module

        def _assign_work_unit(self, node) -> None:
            # The work queue is complete by the first assignment. Reordered here, not in the
            # collection: the workers are sent indexes into their own collection.
            if not getattr(self, "long_first", False):
                self.long_first = True
                units = sorted(self.workqueue.items(), key=self._rank)
                self.workqueue.clear()
                self.workqueue.update(units)
            super()._assign_work_unit(node)

        @staticmethod
        def _rank(unit) -> tuple[int, int]:
            scope, nodeids = unit
            if scope in LONG_FIRST:
                return LONG_FIRST.index(scope), 0
            return len(LONG_FIRST), -len(nodeids)

    return LongFirstLoadFileScheduling(config, log)


def _needs_a_service(item) -> bool:
    return any(
        "DATABASE_URL" in str(mark.kwargs.get("reason", ""))
        or "REDIS_URL" in str(mark.kwargs.get("reason", ""))
        for mark in item.iter_markers("skipif")
    )


def pytest_itemcollected(item):
    # Marked as each test is collected, before -m selects.
    path = Path(str(item.path)).resolve()
    module = path.relative_to(TESTS_DIR).as_posix() if path.is_relative_to(TESTS_DIR) else ""
    if module in SERVICE_SENSITIVE or _needs_a_service(item):
        item.add_marker(pytest.mark.services)


def pytest_sessionfinish(session, exitstatus):
    """AGENTOPS_NO_SKIPS=1 (CI's services pass): a skipped test fails the run. With Postgres,
    Redis and Chromium all there, a skip can only hide a test that did not run."""
    if settings.REDIS_URL:
        import redis
        from django.core.cache import cache

        with contextlib.suppress(redis.RedisError):
            cache.clear()  # this session's keys only (agentops/cache.py)
    if os.environ.get("AGENTOPS_NO_SKIPS") != "1" or exitstatus != 0:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped:
        reporter.write_sep("!", f"{len(skipped)} test(s) skipped where nothing may be", red=True)
        for report in skipped:
            reporter.write_line(f"SKIPPED {report.nodeid}: {report.longrepr}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix, tmp_path_factory):
    """On SQLite, test against a file database (WAL, like the embedded product), not Django's
    shared-cache in-memory one: other threads then wait on the lock instead of failing with
    "database table is locked", and a worker subprocess can open the same database."""
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        db.setdefault("TEST", {})["NAME"] = str(tmp_path_factory.mktemp("db") / "test.sqlite3")


@pytest.fixture(autouse=True)
def _isolated(settings, tmp_path_factory):
    from agentkit.tools import breaker
    from runs.engine.model import models_resting

    breaker.reset()
    models_resting.reset()
    shop_dir = tmp_path_factory.getbasetemp() / "shop"
    shop_dir.mkdir(exist_ok=True)
    settings.AGENTOPS = {
        **settings.AGENTOPS,
        "SHOP_DB": str(shop_dir / "shop.sqlite3"),
        "RETRY_BASE_SECONDS": 0.01,
    }
    yield


def make_user(django_user_model, username: str, *roles: str):
    user = django_user_model.objects.create_user(username=username, password="pw-" + username)
    for role in roles:
        # get_or_create: a transactional test's flush removes the groups the roles migration
        # created, and tests that run after it still need them.
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user


@pytest.fixture
def operator(db, django_user_model):
    return make_user(django_user_model, "olivia", "operator")


@pytest.fixture
def approver(db, django_user_model):
    return make_user(django_user_model, "arthur", "approver")


@pytest.fixture
def viewer(db, django_user_model):
    return make_user(django_user_model, "victor", "viewer")


@pytest.fixture
def admin_user(db, django_user_model):
    return make_user(django_user_model, "ada", "admin")


@pytest.fixture
def eager():
    """Run Celery tasks inline (retries too, without their countdown) so a test sees them.

    On the Celery app, not Django's settings: the app reads those once, on first use, so a
    settings change only worked in a test that happened to run first in its process."""
    from agentops.celery import app

    # Celery 5.6 looks the setting up by its prefixed name (the CELERY_ namespace).
    before = app.conf.CELERY_TASK_ALWAYS_EAGER
    app.conf.CELERY_TASK_ALWAYS_EAGER = True
    yield
    app.conf.CELERY_TASK_ALWAYS_EAGER = before


@pytest.fixture(scope="session", autouse=True)
def _broker_marker():
    """The broker's marker put there once (runs/queue.py): without it the first sweep of a
    test process takes the broker for one that lost its messages and re-sends every queued
    run, as it should in production."""
    from runs import queue

    # A test of an unreachable broker puts it there itself.
    with contextlib.suppress(Exception):
        queue.broker_lost_messages()


@pytest.fixture(autouse=True)
def _a_channel_layer_per_test():
    """Each test gets its own channel layer. channels-redis keeps its receive state (a count,
    an asyncio lock, the loop it belongs to) in the layer object, which Django keeps for the
    process; a test whose event loop closed with a feed's receive still pending never ran the
    receive's `finally`, so every later socket test of that worker met "bound to a different
    event loop". daphne runs one loop for a process's life and a feed's stop() cancels its
    receive, which runs that `finally`: only tests, which start a loop each, need this."""
    yield
    if settings.REDIS_URL:
        from channels.layers import channel_layers

        channel_layers.backends.clear()


@pytest.fixture
def legacy_signatures(settings):
    """The deprecated webhook signature scheme (X-Agentops-Signature) turned on, as an
    install that still has old senders does; it is off by default."""
    settings.AGENTOPS = {**settings.AGENTOPS, "WEBHOOK_LEGACY_SIGNATURES": True}


@pytest.fixture
def no_enqueue(monkeypatch):
    """Capture enqueues instead of sending them, so tests drive the engine step by step. The
    run queues start empty: the sweep reads their depth (a backlog is not a lost message)."""
    from agentops.celery import app as celery_app

    with contextlib.suppress(Exception):
        celery_app.control.purge()
    calls: list[str] = []
    monkeypatch.setattr("runs.queue.enqueue", lambda run_id, **how: calls.append(str(run_id)))
    return calls


on_postgres = pytest.mark.skipif(not settings.IS_POSTGRES, reason="needs DATABASE_URL=postgres://…")


@pytest.fixture
def traces():
    """OpenTelemetry on for the test (agentops/telemetry.py), its spans kept in memory:
    the real SDK and instrumentation, only the exporter is a stand-in."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentops import telemetry

    exporter = InMemorySpanExporter()
    telemetry.start(exporter=exporter, set_global=False)
    # Connections pooled before psycopg was instrumented would make no spans (a process
    # instruments at start-up, before it connects).
    _close_pools()
    yield exporter
    telemetry.stop()
    _close_pools()


def _close_pools() -> None:
    from django.db import connections

    for connection in connections.all(initialized_only=True):
        # A test in a transaction (`db`) keeps its connection, and makes no query spans.
        if getattr(connection, "pool", None) is not None and not connection.in_atomic_block:
            connection.close()
            connection.close_pool()
