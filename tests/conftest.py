import pytest
from django.conf import settings
from django.contrib.auth.models import Group


def pytest_configure(config):
    # Django's test client and Channels' communicator call the server "testserver", a name
    # production settings do not allow. Added here, before any test module is imported:
    # agentops.asgi reads ALLOWED_HOSTS once, when it builds its WebSocket origin check.
    if "testserver" not in settings.ALLOWED_HOSTS:
        settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]


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
