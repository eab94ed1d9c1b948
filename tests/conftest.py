import os
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.contrib.auth.models import Group


def pytest_configure(config):
    # Django's test client and Channels' communicator call the server "testserver", a name
    # production settings do not allow. Added here, before any test module is imported:
    # agentops.asgi reads ALLOWED_HOSTS once, when it builds its WebSocket origin check.
    if "testserver" not in settings.ALLOWED_HOSTS:
        settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    _redis_of_this_worker()


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


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    # One live server and one browser serve the whole browser suite: under pytest-xdist
    # (--dist loadgroup) its tests all go to one worker.
    for item in items:
        if item.get_closest_marker("e2e"):
            item.add_marker(pytest.mark.xdist_group("browser"))


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
    from agentops.tools import breaker

    breaker.reset()
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
def no_enqueue(monkeypatch):
    """Capture enqueues instead of sending them, so tests drive the engine step by step."""
    calls: list[str] = []
    monkeypatch.setattr(
        "runs.queue.enqueue", lambda run_id, countdown=None: calls.append(str(run_id))
    )
    return calls


on_postgres = pytest.mark.skipif(not settings.IS_POSTGRES, reason="needs DATABASE_URL=postgres://…")
