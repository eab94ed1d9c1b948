"""The database connection: a dead pooled connection is never handed out, and a request that
arrives while the database is down gets 503 with Retry-After, never 500."""

import psycopg
import pytest
from django.db import OperationalError, connection
from django.test import Client

from accounts.models import ApiToken
from runs.models import Run, RunQuerySet
from tests.conftest import on_postgres


def _fresh_pool() -> None:
    """A pool of its min_size (2) idle connections, as a web process holds at rest.

    psycopg_pool waits with a growing backoff after each dead connection it finds (about
    1, 2, 4 ... s), so a pool that earlier tests grew to its max_size of dead connections
    would take the request past the pool timeout (503): what is tested here is that no dead
    connection is handed out, with the pool of a process at rest."""
    connection.close()
    connection.close_pool()
    Run.objects.exists()  # opens the new pool
    connection.close()
    connection.pool.wait(timeout=10)


def _terminate_other_backends() -> int:
    """What a Postgres restart does to the pool: every connection it holds dies at once.

    Only the test database's backends: the shared server is never restarted."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    params.pop("prepare_threshold", None)
    with psycopg.connect(**params, autocommit=True) as killer:
        killed = killer.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()[0]
    return killed


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_the_next_query_succeeds_after_every_pooled_connection_was_killed():
    _fresh_pool()
    assert _terminate_other_backends() >= 2
    for _ in range(4):  # more than the pool held: each dead one would have failed once
        assert Run.objects.count() == 0
        connection.close()


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_api_requests_succeed_after_every_pooled_connection_was_killed(operator):
    _, raw = ApiToken.issue(operator, "tests")
    client = Client(headers={"Authorization": f"Bearer {raw}"})
    _fresh_pool()
    assert _terminate_other_backends() >= 2
    statuses = [client.get("/api/runs").status_code for _ in range(4)]
    assert statuses == [200] * 4


@pytest.fixture
def database_down(monkeypatch):
    """Every visible-runs query fails as it would with Postgres down."""

    def refuse(self, user):
        raise OperationalError("connection failed: Connection refused")

    monkeypatch.setattr(RunQuerySet, "visible_to", refuse)


@pytest.mark.django_db
@pytest.mark.parametrize("debug", [False, True])
def test_an_api_request_while_the_database_is_down_is_503_with_retry_after(
    operator, database_down, settings, debug, caplog
):
    settings.DEBUG = debug  # with DEBUG on, ninja would answer a 500 with the traceback
    _, raw = ApiToken.issue(operator, "tests")
    client = Client(headers={"Authorization": f"Bearer {raw}"})
    response = client.get("/api/runs")
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response.json() == {"detail": "the database is unavailable; retry in a few seconds"}
    assert "Connection refused" in caplog.text


@pytest.mark.django_db
def test_a_page_request_while_the_database_is_down_is_503_with_retry_after(
    operator, database_down, caplog
):
    client = Client()
    client.force_login(operator)
    response = client.get("/runs/")
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response["Content-Type"].startswith("text/plain")
    assert response.content.decode() == "the database is unavailable; retry in a few seconds"
    assert "Connection refused" in caplog.text


@pytest.mark.django_db
def test_other_errors_are_still_500(operator, monkeypatch):
    def broken(self, user):
        raise ValueError("a bug")

    monkeypatch.setattr(RunQuerySet, "visible_to", broken)
    client = Client(raise_request_exception=False)
    client.force_login(operator)
    assert client.get("/runs/").status_code == 500
