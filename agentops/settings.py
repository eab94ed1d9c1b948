"""One settings module for every topology, configured by the environment.

Embedded defaults (nothing set): SQLite, Celery on the in-memory transport with a worker
inside the web process, the in-memory channel layer. Production: set DATABASE_URL and
REDIS_URL (and SECRET_KEY, ALLOWED_HOSTS, DEBUG=false).
"""

import ipaddress
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import environ
from kombu import Queue

from agentkit import redis_target

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(environ.Env().str("AGENTOPS_VAR_DIR", default=str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)

env = environ.Env()

DEBUG = env.bool("DEBUG", default=True)
# A dev default only: with DEBUG off the key must come from the environment.
SECRET_KEY = env.str("SECRET_KEY", default="") or (
    "dev-insecure-agentops-key-never-use-in-production" if DEBUG else ""
)
if not SECRET_KEY:
    raise environ.ImproperlyConfigured("SECRET_KEY must be set when DEBUG is false")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "channels",
    # Serves /api/docs from vendored Swagger UI files (no CDN, no inline script for the CSP).
    "ninja",
    "django_htmx",
    "template_partials",
    "csp",
    "axes",
    # django-allauth's accounts and provider identities, installed whatever the settings so that
    # their tables exist once `migrate` has run: turning single sign-on on in an existing
    # install must need no second migrate (a missing socialaccount_socialapp table is a 500 on
    # every sign-in). Its pages are routed only with single sign-on on (agentops/urls.py).
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    # Two-factor sign-in (TOTP) for password sign-ins: accounts/two_factor.py.
    "django_otp",
    "django_otp.plugins.otp_totp",
    # Single-use recovery codes, for when the app or the security key is not at hand.
    "django_otp.plugins.otp_static",
    # The agent library: an app only for its template filters (`{% load untrusted %}`).
    "agentkit",
    "accounts",
    "runs",
    "approvals",
    "history",
    "evals",
    "triggers",
    "gateway",
    "demo",
    "agentops",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    # Errors under /api/ as RFC 9457 problem details, whoever answered them.
    "agentops.problems.problem_details",
    "agentops.middleware.reject_unstorable_text",
    "agentops.middleware.DatabaseUnavailableMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # allauth.account refuses to start without it; it only acts on allauth's own pages.
    "allauth.account.middleware.AccountMiddleware",
    # request.user.is_verified(): whether this session passed a one-time code.
    "django_otp.middleware.OTPMiddleware",
    # AGENTOPS_MFA_REQUIRED: people in scope enrol before anything else.
    "accounts.two_factor.require_enrolment",
    "agentkit.logs.request_context",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last: turns a sign-in refused for too many failures into the lockout page (429).
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "agentops.urls"
ASGI_APPLICATION = "agentops.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    }
]

# --- database ---------------------------------------------------------------------------
DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'agentops.sqlite3'}")
}
IS_POSTGRES = DATABASES["default"]["ENGINE"].endswith("postgresql")
if IS_POSTGRES:
    DATABASES["default"].setdefault("OPTIONS", {})
    if env.bool("DATABASE_POOL", default=True):
        # Worker threads hand their connection back while they wait on the model, so a
        # small pool serves many in-flight runs (see runs/engine/).
        DATABASES["default"]["OPTIONS"]["pool"] = {
            "min_size": 2,
            "max_size": env.int("DATABASE_POOL_MAX", default=20),
            "timeout": 30,
        }
        # After a Postgres restart every pooled connection is dead, and without a check each
        # is handed out once: a 500 per connection, a failed task per worker. Django's check
        # (an empty query on every checkout) cost a round trip per engine step, ~25 % of
        # scripted steps/s (bench/engine_throughput.py); our backend checks with a query only
        # a connection whose socket shows the server ended it, or that sat idle for a while
        # (agentops/db/postgresql/base.py). DATABASE_HEALTH_CHECKS=false: no check at all.
        DATABASES["default"]["ENGINE"] = "agentops.db.postgresql"
        DATABASES["default"]["CONN_HEALTH_CHECKS"] = env.bool(
            "DATABASE_HEALTH_CHECKS", default=True
        )
    DATABASES["default"]["CONN_MAX_AGE"] = 0
else:
    DATABASES["default"]["OPTIONS"] = {
        # IMMEDIATE: writers queue on the lock instead of failing on upgrade; WAL lets the
        # web process read while the in-process worker writes.
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
# Behind PgBouncer in transaction mode (docs: running a fleet) a session's state does not
# outlive a transaction: no server-side cursors (the exports read in keyset batches anyway,
# agentkit/database.py). Django already makes no prepared statements.
DATABASE_PGBOUNCER = IS_POSTGRES and env.bool("DATABASE_PGBOUNCER", default=False)
if DATABASE_PGBOUNCER:
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_USER_MODEL = "accounts.User"
# django-axes first: it refuses a locked-out sign-in before a password is even checked.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# Sign-in throttling (django-axes, accounts/lockouts.py): the login page (the admin's sends
# there) and the one-tap password prompt. A username is locked after AXES_FAILURE_LIMIT
# failures from one address, and after AXES_USERNAME_FAILURE_LIMIT from anywhere (0: never),
# for AXES_COOLOFF_MINUTES (each failure while locked starts the wait again); an admin unlocks
# at once (Users: "Unlock sign-in", or delete its Access attempts).
AXES_FAILURE_LIMIT = env.int("AXES_FAILURE_LIMIT", default=5)
AXES_USERNAME_FAILURE_LIMIT = env.int("AXES_USERNAME_FAILURE_LIMIT", default=20)
AXES_COOLOFF_TIME = timedelta(minutes=env.float("AXES_COOLOFF_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "username"]
AXES_HANDLER = "accounts.lockouts.SignInLockouts"
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "accounts.lockouts.locked_out_response"
AXES_ENABLE_ACCESS_FAILURE_LOG = True
# The client's address is the socket's unless N trusted reverse proxies are declared: then the
# Nth X-Forwarded-For entry from the right, never one the client wrote (and daphne must not be
# started with --proxy-headers without them: agentops/asgi.py refuses).
TRUSTED_PROXY_COUNT = env.int("AXES_PROXY_COUNT", default=0)
if TRUSTED_PROXY_COUNT < 0:
    raise environ.ImproperlyConfigured("AXES_PROXY_COUNT is a number of proxies: 0 or more")
AXES_CLIENT_IP_CALLABLE = "accounts.lockouts.client_address"

# --- single sign-on (accounts/sso.py, accounts/oidc.py) ------------------------------------
# OpenID Connect through django-allauth, on when an issuer is given. The issuer is the URL
# whose /.well-known/openid-configuration describes the provider.
OIDC_ISSUER = env.str("AGENTOPS_OIDC_ISSUER", default="")
SSO_ENABLED = bool(OIDC_ISSUER)
# Local passwords (the login page, the admin's, the one-tap prompt). Off only with single
# sign-on on: otherwise nobody could sign in.
PASSWORD_LOGIN = env.bool("AGENTOPS_PASSWORD_LOGIN", default=True)
AGENTOPS_SSO = {
    "PROVIDER_ID": env.str("AGENTOPS_OIDC_PROVIDER_ID", default="sso"),
    "PROVIDER_NAME": env.str("AGENTOPS_OIDC_PROVIDER_NAME", default="single sign-on"),
    # The claim holding the person's groups (a dotted path for a nested one) and what each
    # of its values grants: "<value>:<role>,..." (accounts/sso.py).
    "ROLE_CLAIM": env.str("AGENTOPS_OIDC_ROLE_CLAIM", default="groups"),
    "ROLES": env.str("AGENTOPS_OIDC_ROLES", default=""),
    # And which teams: "<value>:<team slug>[+launch][+decide][+administer],..." (accounts/sso.py).
    "TEAMS": env.str("AGENTOPS_OIDC_TEAMS", default=""),
}
# Two-factor sign-in (django-otp, TOTP) for password sign-ins; single sign-on leaves it to
# the provider. Who must enrol: "" nobody (whoever enrols is still asked), "all", or a role
# name meaning that role and above (viewer < operator < approver < admin).
MFA_REQUIRED = env.str("AGENTOPS_MFA_REQUIRED", default="").strip().lower()
if MFA_REQUIRED not in ("", "all", "viewer", "operator", "approver", "admin"):
    raise environ.ImproperlyConfigured(
        "AGENTOPS_MFA_REQUIRED must be empty, all, viewer, operator, approver or admin"
    )
# How long the wait between the password and the code may last.
MFA_PENDING_SECONDS = env.int("AGENTOPS_MFA_PENDING_SECONDS", default=300)
OTP_TOTP_ISSUER = "agentops"
# Security keys and passkeys (WebAuthn, accounts/passkeys.py): the relying party id they are
# bound to. Empty: the host the page is served at (one of ALLOWED_HOSTS, which Django checks),
# so a key works on that host only. Set it to a registrable parent domain (example.com for
# ops.example.com) to share keys across its subdomains. Never an IP address: browsers refuse.
WEBAUTHN_RP_ID = env.str("AGENTOPS_WEBAUTHN_RP_ID", default="").strip().lower()
if WEBAUTHN_RP_ID and (":" in WEBAUTHN_RP_ID or "/" in WEBAUTHN_RP_ID):
    raise environ.ImproperlyConfigured(
        "AGENTOPS_WEBAUTHN_RP_ID is a domain name (example.com), without scheme or port"
    )
OTP_ADMIN_HIDE_SENSITIVE_DATA = True
if not PASSWORD_LOGIN and not SSO_ENABLED:
    raise environ.ImproperlyConfigured(
        "AGENTOPS_PASSWORD_LOGIN=false needs single sign-on (AGENTOPS_OIDC_ISSUER)"
    )
if SSO_ENABLED:
    _client_id = env.str("AGENTOPS_OIDC_CLIENT_ID", default="")
    _client_secret = env.str("AGENTOPS_OIDC_CLIENT_SECRET", default="")
    if not _client_id or not _client_secret:
        raise environ.ImproperlyConfigured(
            "AGENTOPS_OIDC_ISSUER needs AGENTOPS_OIDC_CLIENT_ID and AGENTOPS_OIDC_CLIENT_SECRET"
        )
    INSTALLED_APPS += ["allauth.socialaccount.providers.openid_connect"]  # no tables of its own
    # Loads single sign-on sessions' users; checks no password.
    AUTHENTICATION_BACKENDS.append("accounts.sso.SsoBackend")
    if not PASSWORD_LOGIN:
        AUTHENTICATION_BACKENDS.remove("django.contrib.auth.backends.ModelBackend")
    ACCOUNT_ADAPTER = "accounts.oidc.AccountAdapter"
    SOCIALACCOUNT_ADAPTER = "accounts.oidc.SocialAccountAdapter"
    SOCIALACCOUNT_PROVIDERS = {
        "openid_connect": {
            "OAUTH_PKCE_ENABLED": True,
            "APPS": [
                {
                    "provider_id": AGENTOPS_SSO["PROVIDER_ID"],
                    "name": AGENTOPS_SSO["PROVIDER_NAME"],
                    "client_id": _client_id,
                    "secret": _client_secret,
                    "settings": {"server_url": OIDC_ISSUER},
                }
            ],
        }
    }
    # A new person signs up on first sign-in, without a form; an e-mail address never links
    # a provider identity to an existing local account (two people may share one, and a
    # provider may let users set theirs).
    SOCIALACCOUNT_AUTO_SIGNUP = True
    SOCIALACCOUNT_EMAIL_AUTHENTICATION = False
    SOCIALACCOUNT_EMAIL_VERIFICATION = "none"
    SOCIALACCOUNT_STORE_TOKENS = False
    ACCOUNT_EMAIL_VERIFICATION = "none"
    ACCOUNT_UNIQUE_EMAIL = False
    ACCOUNT_LOGIN_METHODS = {"username"}
    ACCOUNT_SIGNUP_FIELDS = ["username*"]

# --- broker, channel layer ----------------------------------------------------------------
REDIS_URL = env.str("REDIS_URL", default="")
EMBEDDED = not REDIS_URL  # one process: in-memory transport, in-process worker and sweeps
# Each web process hears every external call's decision on one channel of its own
# (gateway/waits.py, marked gateway.wakeups.HUB_CHANNEL_MARK): room for a burst of them,
# where the default capacity (100 in memory, 1 500 here) would drop the rest silently.
GATEWAY_HUB_CAPACITY = {"*!gateway-hub-*": 100_000}

# A sentinel:// REDIS_URL names a primary watched by Redis Sentinel (agentkit/redis_target.py):
# the broker, redbeat's lock, the channel layer and every direct client follow its failover.
try:
    REDIS_SENTINEL = redis_target.parse_sentinel_url(REDIS_URL)
except redis_target.RedisURLError as exc:
    raise environ.ImproperlyConfigured(str(exc)) from exc

if REDIS_URL:
    # socket_timeout None: idle consumers must not be dropped after 5 s
    # (django/channels_redis#422).
    channel_host: dict = {"address": REDIS_URL, "socket_timeout": None}
    if REDIS_SENTINEL:
        channel_host = REDIS_SENTINEL.channel_layer_host()
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [channel_host],
                "capacity": 1500,
                "channel_capacity": GATEWAY_HUB_CAPACITY,
                "expiry": 60,
            },
        }
    }
    CELERY_BROKER_URL = REDIS_SENTINEL.kombu_url() if REDIS_SENTINEL else REDIS_URL
    # Beat with a leader lock in Redis (celery-redbeat): any number of `celery beat` processes,
    # one schedules, the others wait on the lock and one takes over within
    # AGENTOPS_BEAT_LOCK_SECONDS of the leader's death; two beats in a rolling deploy never
    # double-fire.
    CELERY_BEAT_SCHEDULER = "agentops.beat:Scheduler"
    CELERY_REDBEAT_REDIS_URL = REDIS_SENTINEL.redbeat_url() if REDIS_SENTINEL else REDIS_URL
    if REDIS_SENTINEL:
        CELERY_REDBEAT_REDIS_OPTIONS = REDIS_SENTINEL.redbeat_options()
    CELERY_REDBEAT_LOCK_TIMEOUT = env.int("AGENTOPS_BEAT_LOCK_SECONDS", default=30)
    # The leader renews its lock at least this often.
    CELERY_BEAT_MAX_LOOP_INTERVAL = max(1, CELERY_REDBEAT_LOCK_TIMEOUT // 5)
    if REDIS_URL.startswith("redis://"):
        # kombu's Redis transport sharing one redis-py client per channel (agentops/broker.py).
        # Not for rediss://: given a transport, kombu no longer applies its TLS default; not
        # for sentinel://: kombu's own Sentinel transport asks the sentinels for the primary.
        CELERY_BROKER_TRANSPORT = "agentops.broker:Transport"
    # One cache for every web process and worker (budgets' settled spend, allauth's rate
    # limits), in REDIS_URL's database next to the broker: under a prefix of its own, which
    # clear() keeps to (agentops/cache.py).
    CACHES = {
        "default": {
            "BACKEND": "agentops.cache.PrefixedRedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": env.str("AGENTOPS_CACHE_PREFIX", default="agentops-cache"),
            "TIMEOUT": 3600,  # callers that keep a value longer say so (budgets: a period)
        }
    }
else:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": "agentops",
            "TIMEOUT": 3600,
            "OPTIONS": {"MAX_ENTRIES": 10_000},
        }
    }
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "agentops.channel_layers.InMemoryChannelLayer",
            "CONFIG": {"channel_capacity": GATEWAY_HUB_CAPACITY},
        }
    }
    CELERY_BROKER_URL = "memory://localhost/"  # a host, or kombu warns on every connection

CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
# Without it each of the pool's threads builds its own (disabled) backend, scanning package
# entry points: measurable CPU in a worker with hundreds of threads.
CELERY_RESULT_BACKEND_THREAD_SAFE = True
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=False)
# Larger than any task: a task runs one time slice of a run (seconds), never an hour.
CELERY_BROKER_TRANSPORT_OPTIONS: dict = {"visibility_timeout": 3600}
if REDIS_SENTINEL:
    CELERY_BROKER_TRANSPORT_OPTIONS.update(REDIS_SENTINEL.kombu_transport_options())
if EMBEDDED:
    # The memory transport polls its queues; the default 1 s poll would add up to a second to
    # every enqueue (launch, resume after a decision) in the embedded worker.
    CELERY_BROKER_TRANSPORT_OPTIONS["polling_interval"] = 0.05
# Agent steps wait on the model and on tools: threads keep many runs in flight per process
# (`celery -A agentops worker` picks these up; override with --pool / --concurrency).
CELERY_WORKER_POOL = "threads"
CELERY_WORKER_CONCURRENCY = env.int("CELERY_WORKER_CONCURRENCY", default=16)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Queues by purpose (runs/queue.py): what a person waits on never queues behind a backlog of
# runs, nor behind the sweeps. A worker started without -Q consumes every queue, taking from
# each in turn; a fleet runs at least one worker with `-Q people` (docs: running a fleet).
AGENTOPS_RUN_QUEUES = env.int("AGENTOPS_RUN_QUEUES", default=1)
CELERY_TASK_DEFAULT_QUEUE = "runs"
CELERY_TASK_QUEUES = [
    Queue(name)
    for name in ("people", "sweeps", "runs", *(f"runs.{n}" for n in range(1, AGENTOPS_RUN_QUEUES)))
]
CELERY_TASK_ROUTES = {
    "approvals.tasks.export_decisions": {"queue": "sweeps"},
    "approvals.tasks.*": {"queue": "people"},
    "approvals.learning.tell_admins.*": {"queue": "people"},
    "gateway.callbacks.*": {"queue": "people"},
    "runs.tasks.sweep": {"queue": "sweeps"},
    "runs.tasks.make_timeline_partitions": {"queue": "sweeps"},
    "triggers.tasks.*": {"queue": "sweeps"},
}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# How often the sweep looks for runs whose lease expired or whose message was lost: at most
# half a lease, so a dead worker's run is taken over within 1.5 leases (15 s by default).
_LEASE_SECONDS = env.float("AGENTOPS_LEASE_SECONDS", default=60.0)
SWEEP_SECONDS = env.float("AGENTOPS_SWEEP_SECONDS", default=min(15.0, _LEASE_SECONDS / 2))
CELERY_BEAT_SCHEDULE = {
    "sweep-expired-leases": {"task": "runs.tasks.sweep", "schedule": SWEEP_SECONDS},
    "expire-approvals": {"task": "approvals.tasks.expire_approvals", "schedule": 30.0},
    "escalate-approvals": {"task": "approvals.tasks.escalate_approvals", "schedule": 30.0},
    "launch-due-schedules": {"task": "triggers.tasks.launch_due_schedules", "schedule": 15.0},
    # API idempotency keys past their window (agentops/idempotency.py).
    "prune-idempotency-keys": {"task": "agentops.tasks.prune_idempotency_keys", "schedule": 600.0},
    # External sessions idle past EXTERNAL_SESSION_IDLE_SECONDS, or of deactivated agents.
    "sweep-external-sessions": {"task": "gateway.tasks.sweep_sessions", "schedule": 60.0},
    # The timeline's monthly partitions, months ahead (runs/retention/partitions.py).
    "make-timeline-partitions": {
        "task": "runs.tasks.make_timeline_partitions",
        "schedule": 6 * 3600.0,
    },
}

# --- the agent loop -------------------------------------------------------------------------
AGENTOPS = {
    # A task works on one run for at most this long, then re-enqueues it, so long runs
    # share workers fairly and a deploy never waits on a long task.
    "TIME_SLICE_SECONDS": env.float("AGENTOPS_TIME_SLICE_SECONDS", default=5.0),
    # A claimed run's lease; a live worker renews it, the sweep re-enqueues expired ones.
    "LEASE_SECONDS": _LEASE_SECONDS,
    # A queued run not sent for this long is sent again by the sweep (its message may have
    # been lost in a broker outage); empty: half of LEASE_SECONDS.
    "QUEUED_RESEND_SECONDS": env.float("AGENTOPS_QUEUED_RESEND_SECONDS", default=None),
    # Run queues, a run's chosen by its agent (runs/queue.py): 1 is one `runs` queue.
    "RUN_QUEUES": AGENTOPS_RUN_QUEUES,
    # The timeline over years (runs/retention/): on Postgres, monthly partitions made this
    # many months ahead by a periodic task; finished runs' timelines kept this many days
    # unless their agent's or team's Retention says otherwise (0: for ever), then moved by
    # `manage.py archive` into compressed files in TIMELINE_ARCHIVE_DIR.
    "TIMELINE_PARTITIONS_AHEAD": env.int("AGENTOPS_TIMELINE_PARTITIONS_AHEAD", default=3),
    "TIMELINE_RETENTION_DAYS": env.int("AGENTOPS_TIMELINE_RETENTION_DAYS", default=0),
    "TIMELINE_ARCHIVE_DIR": env.str(
        "AGENTOPS_TIMELINE_ARCHIVE_DIR", default=str(VAR_DIR / "archive")
    ),
    "LLM_TIMEOUT_SECONDS": env.float("AGENTOPS_LLM_TIMEOUT_SECONDS", default=60.0),
    "LLM_MAX_RETRIES": env.int("AGENTOPS_LLM_MAX_RETRIES", default=3),
    # Model calls a worker process keeps waiting on its event loop, holding no thread
    # (runs/engine/in_flight.py); past this, a call waits in its worker thread. 0: every call
    # waits in its thread.
    "MODEL_CALLS_IN_FLIGHT": env.int("AGENTOPS_MODEL_CALLS_IN_FLIGHT", default=1000),
    "RUN_MAX_RETRIES": env.int("AGENTOPS_RUN_MAX_RETRIES", default=10),
    # After a model failed over to an agent's fallback_model, its calls go to the fallback
    # first for this long (0: each call asks the agent's model again).
    "LLM_FALLBACK_COOLDOWN_SECONDS": env.float(
        "AGENTOPS_LLM_FALLBACK_COOLDOWN_SECONDS", default=60.0
    ),
    # Read-only tool calls of one model turn run at once, at most this many (an agent may
    # declare its own: Agent.max_parallel_tools); 1 runs them one after another.
    "MAX_PARALLEL_TOOLS": env.int("AGENTOPS_MAX_PARALLEL_TOOLS", default=4),
    "RETRY_BASE_SECONDS": env.float("AGENTOPS_RETRY_BASE_SECONDS", default=0.5),
    "CONTEXT_TOKEN_BUDGET": env.int("AGENTOPS_CONTEXT_TOKEN_BUDGET", default=60_000),
    "MAX_INPUT_BYTES": env.int("AGENTOPS_MAX_INPUT_BYTES", default=64_000),
    # The API's Idempotency-Key (agentops/idempotency.py): a key's first answer is replayed
    # for this long, then pruned and the key is free again.
    "IDEMPOTENCY_WINDOW_SECONDS": env.float("AGENTOPS_IDEMPOTENCY_WINDOW_SECONDS", default=86400.0),
    # An async view's claim on a key: another request with the key gets 409 for this long; a
    # claim whose process died is taken over after it.
    "IDEMPOTENCY_LOCK_SECONDS": env.float("AGENTOPS_IDEMPOTENCY_LOCK_SECONDS", default=120.0),
    # An external agent's session `running` (not waiting for a person) with no call or result
    # for this long was abandoned: it ends, failed, "idle" (gateway/sessions.py end_idle,
    # swept every minute). 0 keeps sessions open until their max_seconds.
    "EXTERNAL_SESSION_IDLE_SECONDS": env.float(
        "AGENTOPS_EXTERNAL_SESSION_IDLE_SECONDS", default=1800.0
    ),
    "SHOP_DB": env.str("AGENTOPS_SHOP_DB", default=str(VAR_DIR / "shop.sqlite3")),
    # Approval notifications (approvals/notify/). Links in e-mails and webhooks start here.
    "PUBLIC_URL": env.str("AGENTOPS_PUBLIC_URL", default="http://127.0.0.1:8000"),
    # E-mail approvers (approver/admin role, or the agent's named approvers) on each request.
    "NOTIFY_EMAIL": env.bool("AGENTOPS_NOTIFY_EMAIL", default=True),
    # Comma-separated; "slack+https://..." or a hooks.slack.com URL gets a Slack payload.
    "WEBHOOK_URLS": env.list("AGENTOPS_WEBHOOK_URLS", default=[]),
    # The key that signs approval webhooks (agentkit/signing.py, Standard Webhooks); generic
    # webhooks are not sent without it. Comma-separated while rotating: every key signs
    # (several v1 signatures), so a receiver holding either one accepts.
    "WEBHOOK_SECRET": env.list("AGENTOPS_WEBHOOK_SECRET", default=[]),
    "WEBHOOK_TIMEOUT_SECONDS": env.float("AGENTOPS_WEBHOOK_TIMEOUT_SECONDS", default=5.0),
    # External agents' callback URLs (gateway/egress.py) never reach loopback, link-local
    # (cloud metadata), private or reserved addresses, except these networks (CIDRs, e.g.
    # "10.20.0.0/16,127.0.0.1/32") for receivers on premises. Parsed here: a typo stops start-up.
    "CALLBACK_ALLOWED_NETWORKS": [
        str(ipaddress.ip_network(n.strip(), strict=False))
        for n in env.list("AGENTOPS_CALLBACK_ALLOWED_NETWORKS", default=[])
        if n.strip()
    ],
    # Incoming webhooks (agentkit/signing.py): a signed timestamp further than this from now,
    # past or future, is refused, and a delivery id already accepted never launches again.
    "WEBHOOK_TOLERANCE_SECONDS": env.float("AGENTOPS_WEBHOOK_TOLERANCE_SECONDS", default=300.0),
    # Deprecated: the scheme before Standard Webhooks (X-Agentops-Signature: sha256=<hex>).
    # Turned on, incoming requests signed with it are accepted (each logged as deprecated)
    # and outgoing ones carry its headers beside the new ones. Off by default; removed after
    # 2027-06-30.
    "WEBHOOK_LEGACY_SIGNATURES": env.bool("AGENTOPS_WEBHOOK_LEGACY_SIGNATURES", default=False),
    # Rubber-stamp guard: decisions made faster than this after opening are flagged.
    "FAST_DECISION_SECONDS": env.float("AGENTOPS_FAST_DECISION_SECONDS", default=5.0),
    # The Slack app (approvals/notify/slack/app.py): on only when the token, the signing secret
    # and the channel are all set. SLACK_API_URL is Slack's Web API (tests point it at a local
    # fake).
    "SLACK_BOT_TOKEN": env.str("SLACK_BOT_TOKEN", default=""),
    "SLACK_SIGNING_SECRET": env.str("SLACK_SIGNING_SECRET", default=""),
    "SLACK_CHANNEL": env.str("SLACK_CHANNEL", default=""),
    "SLACK_API_URL": env.str("SLACK_API_URL", default="https://slack.com/api/"),
    # Map an unknown Slack user to the agentops user with the same e-mail (users.info); off
    # by default: only as safe as the workspace's control of its members' addresses.
    "SLACK_MAP_BY_EMAIL": env.bool("AGENTOPS_SLACK_MAP_BY_EMAIL", default=False),
    # One-tap decision links in approval e-mails (approvals/notify/one_tap/links.py) live at
    # most this long (and never past the approval's own deadline).
    "ONE_TAP_MAX_AGE_SECONDS": env.int("AGENTOPS_ONE_TAP_MAX_AGE_SECONDS", default=24 * 3600),
    # The learning gate policy (approvals/learning/rules.py): False switches it off everywhere (no
    # proposals, active rules match nothing); agents opt in with GateRules.learning.
    "LEARNING_POLICY": env.bool("AGENTOPS_LEARNING_POLICY", default=True),
    # Set: which borderline calls are sampled is a function of this seed and the call, so a
    # test or a simulation sees the same sample every time. Unset: drawn from the OS.
    "GATE_SAMPLING_SEED": env.str("AGENTOPS_GATE_SAMPLING_SEED", default=""),
    # Post-hoc review: calls per agent and day that ran without a person, sampled for a
    # reviewer (an agent's GateRules.review_per_day overrides it; 0 turns sampling off).
    "REVIEW_SAMPLE_PER_DAY": env.int("AGENTOPS_REVIEW_SAMPLE_PER_DAY", default=5),
    # Cross-run drift (runs/drift.py): an agent's last this many finished runs are compared
    # with the as many before them.
    "DRIFT_RUNS": env.int("AGENTOPS_DRIFT_RUNS", default=10),
    # Approver quality (approvals/learning/stats.py): rubber-stamping is flagged when the median
    # seconds to decide high-risk calls is below the floor and the approval rate above the
    # ceiling.
    "RUBBER_STAMP_FLOOR_SECONDS": env.float("AGENTOPS_RUBBER_STAMP_FLOOR_SECONDS", default=10.0),
    "RUBBER_STAMP_CEILING": env.float("AGENTOPS_RUBBER_STAMP_CEILING", default=0.95),
    # Compliance evidence (approvals/evidence/export.py): the key that signs decision exports;
    # unset, one derived from SECRET_KEY (then rotating SECRET_KEY changes it: keep the old one
    # to verify old files). The scheduled export writes the previous period (day, week or
    # month, UTC) to DECISIONS_EXPORT_DIR at each AGENTOPS_DECISIONS_EXPORT_CRON.
    "EVIDENCE_KEY": env.str("AGENTOPS_EVIDENCE_KEY", default=""),
    "DECISIONS_EXPORT_DIR": env.str("AGENTOPS_DECISIONS_EXPORT_DIR", default=""),
    "DECISIONS_EXPORT_FORMAT": env.str("AGENTOPS_DECISIONS_EXPORT_FORMAT", default="jsonl"),
    "DECISIONS_EXPORT_PERIOD": env.str("AGENTOPS_DECISIONS_EXPORT_PERIOD", default="day"),
}
if AGENTOPS["DECISIONS_EXPORT_FORMAT"] not in ("csv", "jsonl"):
    raise environ.ImproperlyConfigured("AGENTOPS_DECISIONS_EXPORT_FORMAT must be csv or jsonl")
if AGENTOPS["DECISIONS_EXPORT_PERIOD"] not in ("day", "week", "month"):
    raise environ.ImproperlyConfigured(
        "AGENTOPS_DECISIONS_EXPORT_PERIOD must be day, week or month"
    )
# Five cron fields (minute hour day-of-month month day-of-week), e.g. "15 0 * * *": beat runs
# the scheduled decisions export then. Needs AGENTOPS_DECISIONS_EXPORT_DIR.
DECISIONS_EXPORT_CRON = env.str("AGENTOPS_DECISIONS_EXPORT_CRON", default="")
if DECISIONS_EXPORT_CRON:
    from celery.schedules import crontab

    if not AGENTOPS["DECISIONS_EXPORT_DIR"]:
        raise environ.ImproperlyConfigured(
            "AGENTOPS_DECISIONS_EXPORT_CRON needs AGENTOPS_DECISIONS_EXPORT_DIR"
        )
    try:
        if len(DECISIONS_EXPORT_CRON.split()) != 5:
            raise ValueError("not five fields")
        _cron = crontab.from_string(DECISIONS_EXPORT_CRON)
    except ValueError as exc:
        raise environ.ImproperlyConfigured(
            f"AGENTOPS_DECISIONS_EXPORT_CRON takes five cron fields, e.g. '15 0 * * *' ({exc})"
        ) from None
    CELERY_BEAT_SCHEDULE["export-decisions"] = {
        "task": "approvals.tasks.export_decisions",
        "schedule": _cron,
    }
ANTHROPIC_API_KEY = env.str("ANTHROPIC_API_KEY", default="")
ANTHROPIC_BASE_URL = env.str("ANTHROPIC_BASE_URL", default="")
# The SDK's OpenTelemetry spans (agentkit/llm/anthropic.py): off unless asked for; then the
# SDK's own ANTHROPIC_OPEN_TELEMETRY_* variables and tracer provider apply.
ANTHROPIC_OPEN_TELEMETRY = env.bool("ANTHROPIC_OPEN_TELEMETRY", default=False)
# Cache breakpoints on each request's stable prefix (agentkit/llm/anthropic.py).
ANTHROPIC_PROMPT_CACHING = env.bool("ANTHROPIC_PROMPT_CACHING", default=True)

# --- traces (agentops/telemetry.py, agentkit/tracing.py) -------------------------------------
# OpenTelemetry traces of runs, requests, tasks and queries, sent over OTLP/HTTP to
# OTEL_EXPORTER_OTLP_ENDPOINT (the SDK reads its OTEL_* variables itself). On when that
# endpoint is set, unless AGENTOPS_OTEL=false; AGENTOPS_OTEL=true turns it on without one
# (the SDK's default endpoint, http://localhost:4318). Off, nothing is instrumented.
_otlp_endpoint = env.str("OTEL_EXPORTER_OTLP_ENDPOINT", default="") or env.str(
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", default=""
)
AGENTOPS_OTEL = env.bool("AGENTOPS_OTEL", default=bool(_otlp_endpoint)) and not env.bool(
    "OTEL_SDK_DISABLED", default=False
)
OTEL_SERVICE_NAME = env.str("OTEL_SERVICE_NAME", default="agentops")
# The run page links its trace id here (runs/trace_links.py): an http(s) URL template with
# {trace_id}, e.g. https://tempo.example/trace/{trace_id}; unset, the id is shown unlinked.
AGENTOPS["TRACE_URL"] = env.str("AGENTOPS_TRACE_URL", default="").strip()
if AGENTOPS["TRACE_URL"] and (
    not AGENTOPS["TRACE_URL"].lower().startswith(("http://", "https://"))
    or "{trace_id}" not in AGENTOPS["TRACE_URL"]
):
    raise environ.ImproperlyConfigured(
        "AGENTOPS_TRACE_URL must be an http(s) URL with {trace_id} in it, e.g. "
        "https://tempo.example/trace/{trace_id}"
    )

# --- monitoring (agentops/monitoring.py, agentkit/metrics.py) -----------------------------------
# /metrics answers only with this bearer token; unset, it does not exist (404).
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")
# Shared by every process of the host (web, workers, beat) to add up their counters; read by
# prometheus_client itself from the environment. Unset: each process counts on its own.
PROMETHEUS_MULTIPROC_DIR = env.str("PROMETHEUS_MULTIPROC_DIR", default="")
# A Celery worker serves its pod's counters on this port (agentops/metrics_server.py), for pods
# that run workers and no web process. Unset: no such server.
METRICS_PORT = env.int("METRICS_PORT", default=0)

# --- auth, security ----------------------------------------------------------------------
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SESSION_COOKIE_HTTPONLY = True
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "frame-ancestors": ["'none'"],
        "form-action": ["'self'"],
        "base-uri": ["'none'"],
        "object-src": ["'none'"],
    }
}
if SSO_ENABLED:
    # The sign-in button posts to us and is redirected to the provider's authorize page:
    # browsers hold that redirect to form-action too. The provider's authorization endpoint
    # is on the issuer's origin (Keycloak, Okta, Entra, Google all do so), as is the end-session
    # endpoint sign-out is redirected to (accounts/provider_logout.py keeps no other).
    _issuer = urlsplit(OIDC_ISSUER)
    CONTENT_SECURITY_POLICY["DIRECTIVES"]["form-action"].append(
        f"{_issuer.scheme}://{_issuer.netloc}"
    )
if not DEBUG:
    SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=True)
    # Prometheus scrapes a web process directly, inside the network, over plain HTTP.
    SECURE_REDIRECT_EXEMPT = [r"^metrics(/processes|/state)?$"]
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True

# --- e-mail: agents' mail lands in a local outbox an operator can inspect ----------------------
EMAIL_BACKEND = env.str("EMAIL_BACKEND", default="demo.mail.OutboxEmailBackend")
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="agentops@localhost")

# --- static ---------------------------------------------------------------------------------
STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)  # WhiteNoise warns on every start when it is missing
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if not DEBUG
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

# JSON lines in production (or LOG_FORMAT=json), readable text in DEBUG; either way every line
# carries the run, step, task and user it is about, where known (agentkit/logs.py).
LOG_FORMAT = env.str("LOG_FORMAT", default="text" if DEBUG else "json")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "context": {"()": "agentkit.logs.ContextFilter"},
        "secrets": {"()": "agentkit.logs.RedactSecrets"},
    },
    "formatters": {
        "json": {"()": "agentkit.logs.JsonFormatter"},
        "text": {"()": "agentkit.logs.TextFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "filters": ["context", "secrets"],
            "formatter": "json" if LOG_FORMAT == "json" else "text",
        }
    },
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="WARNING")},
    "loggers": {
        "agentops": {"level": env.str("LOG_LEVEL", default="INFO")},
        # Django's own defaults give these loggers handlers of their own (plain text, and
        # in DEBUG a second copy of every django.request warning): here they only pass
        # their records on to the root's handler, so each line is written once, in the
        # format asked for.
        "django": {"handlers": [], "level": "INFO", "propagate": True},
        "django.server": {"handlers": [], "level": "INFO", "propagate": True},
    },
}
