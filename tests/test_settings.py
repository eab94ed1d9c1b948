"""Settings are read once per process, so each case loads them in a fresh interpreter."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONTROLLED = (
    "DATABASE_URL",
    "REDIS_URL",
    "DEBUG",
    "SECRET_KEY",
    "ALLOWED_HOSTS",
    "DATABASE_POOL",
    "DATABASE_POOL_MAX",
    "CELERY_WORKER_CONCURRENCY",
    "DJANGO_SETTINGS_MODULE",
    "AGENTOPS_OIDC_ISSUER",
    "AGENTOPS_OIDC_CLIENT_ID",
    "AGENTOPS_OIDC_CLIENT_SECRET",
    "AGENTOPS_OIDC_ROLES",
    "AGENTOPS_PASSWORD_LOGIN",
    "AGENTOPS_MFA_REQUIRED",
    "AGENTOPS_OTEL",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_SDK_DISABLED",
    "METRICS_PORT",
    "AGENTOPS_TRACE_URL",
)

DUMP = """
import json
from agentops import settings as s
db = s.DATABASES["default"]
print(json.dumps({
    "engine": db["ENGINE"],
    "name": str(db["NAME"]),
    "host": db.get("HOST"),
    "options": db.get("OPTIONS", {}),
    "conn_max_age": db.get("CONN_MAX_AGE"),
    "conn_health_checks": db.get("CONN_HEALTH_CHECKS"),
    "embedded": s.EMBEDDED,
    "broker": s.CELERY_BROKER_URL,
    "transport_options": s.CELERY_BROKER_TRANSPORT_OPTIONS,
    "transport": getattr(s, "CELERY_BROKER_TRANSPORT", None),
    "redbeat_url": getattr(s, "CELERY_REDBEAT_REDIS_URL", None),
    "redbeat_options": getattr(s, "CELERY_REDBEAT_REDIS_OPTIONS", None),
    "channel_layers": s.CHANNEL_LAYERS,
    "pool": s.CELERY_WORKER_POOL,
    "concurrency": s.CELERY_WORKER_CONCURRENCY,
    "debug": s.DEBUG,
    "allowed_hosts": s.ALLOWED_HOSTS,
    "ssl_redirect": getattr(s, "SECURE_SSL_REDIRECT", False),
    "session_cookie_secure": getattr(s, "SESSION_COOKIE_SECURE", False),
    "sso": s.SSO_ENABLED,
    "backends": s.AUTHENTICATION_BACKENDS,
    "allauth_apps": [a for a in s.INSTALLED_APPS if a.startswith("allauth")],
    "middleware": s.MIDDLEWARE,
    "form_action": s.CONTENT_SECURITY_POLICY["DIRECTIVES"]["form-action"],
    "oidc_apps": getattr(s, "SOCIALACCOUNT_PROVIDERS", {}).get("openid_connect", {}).get("APPS"),
    "otel": s.AGENTOPS_OTEL,
    "metrics_port": s.METRICS_PORT,
    "mfa_required": s.MFA_REQUIRED,
}, default=str))
"""


def load(tmp_path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in CONTROLLED}
    clean["AGENTOPS_VAR_DIR"] = str(tmp_path)
    clean.update(env)
    return subprocess.run(
        [sys.executable, "-c", DUMP], cwd=ROOT, env=clean, capture_output=True, text=True
    )


def settings_for(tmp_path, **env: str) -> dict:
    proc = load(tmp_path, **env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_nothing_set_means_embedded(tmp_path):
    s = settings_for(tmp_path)
    assert s["engine"] == "django.db.backends.sqlite3"
    assert s["name"] == str(tmp_path / "agentops.sqlite3")
    assert s["options"]["transaction_mode"] == "IMMEDIATE"
    assert s["embedded"] is True
    assert s["broker"].startswith("memory://")
    # The embedded worker must not wait a second per enqueue.
    assert s["transport_options"]["polling_interval"] < 0.5
    layer = s["channel_layers"]["default"]["BACKEND"]
    assert layer == "agentops.channel_layers.InMemoryChannelLayer"
    assert s["debug"] is True
    # Local addresses only: the test client's "testserver" is added by the test session.
    assert s["allowed_hosts"] == ["127.0.0.1", "localhost", "[::1]"]


def test_database_url_postgres_uses_a_connection_pool(tmp_path):
    s = settings_for(
        tmp_path,
        DATABASE_URL="postgres://agent:pw@db.internal:5432/agentops",
        DATABASE_POOL_MAX="7",
    )
    # Django's backend with a pool that checks a connection only when in doubt.
    assert s["engine"] == "agentops.db.postgresql"
    assert s["name"] == "agentops"
    assert s["host"] == "db.internal"
    assert s["options"]["pool"]["max_size"] == 7
    assert s["options"]["pool"]["min_size"] >= 1
    # With a pool, Django must not also keep persistent connections.
    assert s["conn_max_age"] == 0
    # A dead connection is never handed out (tests/test_database.py).
    assert s["conn_health_checks"] is True


def test_database_pool_can_be_turned_off(tmp_path):
    s = settings_for(
        tmp_path, DATABASE_URL="postgres://agent@db:5432/agentops", DATABASE_POOL="false"
    )
    assert "pool" not in s["options"]
    assert s["engine"] == "django.db.backends.postgresql"


def test_redis_url_is_broker_and_channel_layer(tmp_path):
    s = settings_for(tmp_path, REDIS_URL="redis://cache.internal:6379/3")
    assert s["embedded"] is False
    assert s["broker"] == "redis://cache.internal:6379/3"
    # kombu's Redis transport sharing a client per channel (tests/test_broker.py).
    assert s["transport"] == "agentops.broker:Transport"
    assert "polling_interval" not in s["transport_options"]
    layer = s["channel_layers"]["default"]
    assert layer["BACKEND"] == "channels_redis.core.RedisChannelLayer"
    # socket_timeout None: idle WebSocket consumers must not be dropped (channels_redis#422).
    assert layer["CONFIG"]["hosts"] == [
        {"address": "redis://cache.internal:6379/3", "socket_timeout": None}
    ]


def test_a_tls_redis_url_keeps_kombus_own_transport(tmp_path):
    # Given a transport, kombu would no longer apply its TLS default to a bare rediss:// URL.
    s = settings_for(tmp_path, REDIS_URL="rediss://cache.internal:6380/3")
    assert s["broker"] == "rediss://cache.internal:6380/3"
    assert s["transport"] is None


def test_a_sentinel_redis_url_points_broker_beat_and_layer_at_the_sentinels(tmp_path):
    s = settings_for(tmp_path, REDIS_URL="sentinel://:s%40cret@s1,s2:26380,s3:26381/mymaster/2")
    assert s["embedded"] is False
    # kombu's own Sentinel transport: one URL per sentinel, the master by name.
    assert s["broker"] == (
        "sentinel://:s%40cret@s1:26379/2;sentinel://:s%40cret@s2:26380/2;"
        "sentinel://:s%40cret@s3:26381/2"
    )
    assert s["transport_options"]["master_name"] == "mymaster"
    assert s["transport_options"]["visibility_timeout"] == 3600
    # The per-channel client transport subclasses the plain one: not for Sentinel.
    assert s["transport"] is None
    sentinels = [["s1", 26379], ["s2", 26380], ["s3", 26381]]
    assert s["redbeat_url"].startswith("redis-sentinel://")
    assert s["redbeat_options"] == {
        "sentinels": sentinels,
        "service_name": "mymaster",
        "db": 2,
        "password": "s@cret",
    }
    assert s["channel_layers"]["default"]["CONFIG"]["hosts"] == [
        {
            "sentinels": sentinels,
            "master_name": "mymaster",
            "db": 2,
            "password": "s@cret",
            "socket_timeout": None,
        }
    ]


def test_a_sentinel_password_reaches_every_sentinel_client(tmp_path):
    s = settings_for(tmp_path, REDIS_URL="sentinel://s1/mymaster?sentinel_password=guard")
    assert s["transport_options"]["sentinel_kwargs"] == {"password": "guard"}
    assert s["redbeat_options"]["sentinel_kwargs"] == {"password": "guard"}
    host = s["channel_layers"]["default"]["CONFIG"]["hosts"][0]
    assert host["sentinel_kwargs"] == {"password": "guard"}
    assert "password" not in host  # the primary's own password was not given


def test_a_plain_redis_url_needs_no_redbeat_options(tmp_path):
    s = settings_for(tmp_path, REDIS_URL="redis://cache.internal:6379/3")
    assert s["redbeat_url"] == "redis://cache.internal:6379/3"
    assert s["redbeat_options"] is None


@pytest.mark.parametrize(
    "url",
    [
        "sentinel://s1:26379",  # no master name
        "sentinel:///mymaster/0",  # no sentinel
        "sentinel://s1:port/mymaster/0",
        "sentinel://s1:26379/mymaster/zero",
        "sentinel://s1:26379/mymaster/0/extra",
    ],
)
def test_a_malformed_sentinel_url_refuses_to_start(tmp_path, url):
    proc = load(tmp_path, REDIS_URL=url)
    assert proc.returncode != 0
    assert "ImproperlyConfigured: REDIS_URL" in proc.stderr


def test_worker_defaults_suit_io_bound_steps(tmp_path):
    s = settings_for(tmp_path)
    assert s["pool"] == "threads"
    assert s["concurrency"] == 16
    assert settings_for(tmp_path, CELERY_WORKER_CONCURRENCY="250")["concurrency"] == 250


def test_production_without_secret_key_refuses_to_start(tmp_path):
    proc = load(tmp_path, DEBUG="false", ALLOWED_HOSTS="example.com")
    assert proc.returncode != 0
    assert "ImproperlyConfigured" in proc.stderr
    assert "SECRET_KEY" in proc.stderr


def test_production_settings_are_secure(tmp_path):
    s = settings_for(
        tmp_path, DEBUG="false", SECRET_KEY="k" * 10 + "x" * 50, ALLOWED_HOSTS="a.example,b.example"
    )
    assert s["debug"] is False
    assert s["allowed_hosts"] == ["a.example", "b.example"]
    assert s["ssl_redirect"] is True
    assert s["session_cookie_secure"] is True


@pytest.mark.parametrize("debug", ["false", "0", "no"])
def test_debug_parses_common_false_values(tmp_path, debug):
    assert settings_for(tmp_path, DEBUG=debug, SECRET_KEY="s" * 60)["debug"] is False


SSO = {
    "AGENTOPS_OIDC_ISSUER": "https://login.example.com/realms/acme",
    "AGENTOPS_OIDC_CLIENT_ID": "agentops",
    "AGENTOPS_OIDC_CLIENT_SECRET": "client-secret-from-the-provider",
    "AGENTOPS_OIDC_ROLES": "agentops-operators:operator",
}


def test_no_oidc_issuer_means_no_single_sign_on(tmp_path):
    s = settings_for(tmp_path)
    assert s["sso"] is False
    # allauth's tables are made whatever the settings; its OpenID Connect provider is not on.
    assert s["allauth_apps"] == ["allauth", "allauth.account", "allauth.socialaccount"]
    assert s["oidc_apps"] is None
    assert s["backends"] == [
        "axes.backends.AxesStandaloneBackend",
        "django.contrib.auth.backends.ModelBackend",
    ]
    assert s["form_action"] == ["'self'"]


def test_an_oidc_issuer_turns_single_sign_on_on_beside_passwords(tmp_path):
    s = settings_for(tmp_path, **SSO)
    assert s["sso"] is True
    assert "allauth.socialaccount.providers.openid_connect" in s["allauth_apps"]
    assert "allauth.account.middleware.AccountMiddleware" in s["middleware"]
    assert s["backends"] == [
        "axes.backends.AxesStandaloneBackend",
        "django.contrib.auth.backends.ModelBackend",
        "accounts.sso.SsoBackend",
    ]
    [app] = s["oidc_apps"]
    assert app["client_id"] == "agentops"
    assert app["settings"] == {"server_url": "https://login.example.com/realms/acme"}
    # The sign-in button's redirect to the provider is a form action the CSP must allow.
    assert s["form_action"] == ["'self'", "https://login.example.com"]


def test_password_login_can_be_turned_off_with_single_sign_on(tmp_path):
    s = settings_for(tmp_path, AGENTOPS_PASSWORD_LOGIN="false", **SSO)
    assert "django.contrib.auth.backends.ModelBackend" not in s["backends"]
    assert "accounts.sso.SsoBackend" in s["backends"]


def test_password_login_off_without_single_sign_on_refuses_to_start(tmp_path):
    proc = load(tmp_path, AGENTOPS_PASSWORD_LOGIN="false")
    assert proc.returncode != 0
    assert "AGENTOPS_PASSWORD_LOGIN=false needs single sign-on" in proc.stderr


def test_two_factor_is_required_of_a_role_and_above_or_all(tmp_path):
    assert settings_for(tmp_path)["mfa_required"] == ""
    assert settings_for(tmp_path, AGENTOPS_MFA_REQUIRED=" Approver ")["mfa_required"] == "approver"
    proc = load(tmp_path, AGENTOPS_MFA_REQUIRED="approvers")
    assert proc.returncode != 0
    assert "AGENTOPS_MFA_REQUIRED must be empty, all" in proc.stderr


def test_an_oidc_issuer_without_its_client_refuses_to_start(tmp_path):
    proc = load(tmp_path, AGENTOPS_OIDC_ISSUER=SSO["AGENTOPS_OIDC_ISSUER"])
    assert proc.returncode != 0
    assert "AGENTOPS_OIDC_CLIENT_ID and AGENTOPS_OIDC_CLIENT_SECRET" in proc.stderr


# Migrates a fresh SQLite installation twice: minutes on a loaded runner.
@pytest.mark.timeout(900)
def test_single_sign_on_turned_on_in_an_existing_install_needs_no_second_migrate(tmp_path):
    # Migrated with passwords only, as an install that has never had single sign-on; then
    # started with an issuer: every table allauth reads is already there.
    env = {k: v for k, v in os.environ.items() if k not in CONTROLLED}
    env["AGENTOPS_VAR_DIR"] = str(tmp_path)

    def manage(*args: str, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env={**env, **extra},
            capture_output=True,
            text=True,
        )

    migrated = manage("migrate", "--noinput")
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    check = manage("migrate", "--check", **SSO)
    assert check.returncode == 0, check.stdout + check.stderr
    read = manage(
        "shell",
        "-c",
        "from allauth.socialaccount.models import SocialApp; "
        "print(SocialApp.objects.count(), 'social apps')",
        **SSO,
    )
    assert read.returncode == 0 and "0 social apps" in read.stdout, read.stderr


@pytest.mark.parametrize("sso", [False, True], ids=["passwords", "single-sign-on"])
def test_check_deploy_is_clean_with_production_settings(tmp_path, sso):
    env = {k: v for k, v in os.environ.items() if k not in CONTROLLED}
    env.update(
        AGENTOPS_VAR_DIR=str(tmp_path),
        DEBUG="false",
        SECRET_KEY="a-long-random-production-key-" + "Zq8#pL2v" * 5,
        ALLOWED_HOSTS="example.com",
        **(SSO if sso else {}),
    )
    proc = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no issues" in proc.stdout


ENDPOINT = "http://otel-collector:4318"


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{ENDPOINT}/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "AGENTOPS_OTEL": "false"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SDK_DISABLED": "true"}, False),
        ({"AGENTOPS_OTEL": "true"}, True),
    ],
)
def test_traces_are_on_only_when_configured(tmp_path, env, on):
    assert settings_for(tmp_path, **env)["otel"] is on


def test_a_worker_serves_metrics_only_with_a_port(tmp_path):
    assert settings_for(tmp_path)["metrics_port"] == 0
    assert settings_for(tmp_path, METRICS_PORT="9100")["metrics_port"] == 9100


def test_the_webauthn_rp_id_is_a_bare_domain(tmp_path):
    for bad in ("https://example.com", "example.com:8443"):
        proc = load(tmp_path, AGENTOPS_WEBAUTHN_RP_ID=bad)
        assert proc.returncode != 0
        assert "AGENTOPS_WEBAUTHN_RP_ID is a domain name" in proc.stderr
    assert load(tmp_path, AGENTOPS_WEBAUTHN_RP_ID="Example.com").returncode == 0
