"""The database of a production-like topology made ready (bench/chaos.py in its own process,
tests/test_fleet.py as `python -m tests.support.topology_setup`, which prints JSON): migrations,
static files, the demo users, an API token for the operator and the approver, and a signed-in
session of each for the pages and WebSockets. One process for all of it: a `manage.py` start
each costs seconds on a small machine."""

import io
import json
import os


def prepare(token_name: str) -> tuple[str, str]:
    """Migrate, collect static files, seed the demo users; returns (operator, approver) tokens."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from accounts.models import ApiToken

    for command, options in (
        ("migrate", {"interactive": False}),
        ("collectstatic", {"interactive": False}),
        ("seed_demo", {}),
    ):
        call_command(command, verbosity=0, stdout=io.StringIO(), **options)
    users = get_user_model().objects
    operator, approver = (
        ApiToken.issue(users.get(username=u), token_name)[1] for u in ("operator", "approver")
    )
    return operator, approver


def session_for(username: str) -> str:
    """A signed-in session of `username` (its key for the sessionid cookie)."""
    from django.contrib.auth import get_user_model
    from django.contrib.sessions.backends.db import SessionStore
    from django.db import connection

    user = get_user_model().objects.get(username=username)
    session = SessionStore()
    session.update(
        {
            "_auth_user_id": str(user.pk),
            "_auth_user_backend": "django.contrib.auth.backends.ModelBackend",
            "_auth_user_hash": user.get_session_auth_hash(),
        }
    )
    session.create()
    connection.close()  # outside a request nothing closes it, and Postgres will restart
    return session.session_key


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
    import django

    django.setup()
    operator, approver = prepare("fleet")
    print(
        json.dumps(
            {
                "tokens": {"operator": operator, "approver": approver},
                "sessions": {u: session_for(u) for u in ("operator", "approver")},
            }
        )
    )
