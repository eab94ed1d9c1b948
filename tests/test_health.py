"""GET /healthz: the database and the broker, no auth, 503 naming what failed."""

import socket

import pytest
from django.conf import settings as django_settings
from django.db import OperationalError
from django.test import Client

from agentops import health


def _get():
    # A bare client: no session, no token, no CSRF cookie, as a load balancer would call it.
    return Client(enforce_csrf_checks=True).get("/healthz")


@pytest.mark.django_db
def test_healthz_is_ok_without_any_credentials():
    response = _get()
    assert response.status_code == 200
    assert response.json() == {"ok": True, "database": "ok", "broker": "ok"}
    assert "no-cache" in response["Cache-Control"]


@pytest.mark.django_db
def test_healthz_is_503_when_the_database_fails(monkeypatch):
    class BrokenConnection:
        def cursor(self):
            raise OperationalError("connection refused")

    monkeypatch.setattr(health, "connection", BrokenConnection())
    response = _get()
    assert response.status_code == 503
    body = response.json()
    assert body["ok"] is False
    assert body["database"] == "error: OperationalError"
    assert body["broker"] == "ok"


@pytest.mark.django_db
def test_healthz_is_503_after_one_bounded_attempt_when_redis_is_unreachable(settings, monkeypatch):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    attempts: list[float | None] = []
    connect = socket.socket.connect

    def record(sock, address):
        if address[1:2] == (1,):
            attempts.append(sock.gettimeout())
        return connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", record)
    response = _get()
    assert response.status_code == 503
    body = response.json()
    assert body == {"ok": False, "database": "ok", "broker": body["broker"]}
    assert body["broker"].startswith("error: ")
    # It gives up after one connection attempt, and that attempt had the broker's timeout: a
    # load balancer's probe never waits on retries or on the OS's connect timeout.
    assert attempts == [health.BROKER_TIMEOUT_SECONDS]


@pytest.mark.django_db
@pytest.mark.skipif(not django_settings.REDIS_URL, reason="needs REDIS_URL=redis://…")
def test_healthz_pings_the_real_redis(settings):
    assert settings.REDIS_URL.startswith("redis://")
    response = _get()
    assert response.status_code == 200, response.content
    assert response.json()["broker"] == "ok"


@pytest.mark.django_db
def test_healthz_only_answers_get():
    assert Client().post("/healthz").status_code == 405
