"""`manage.py seed_demo`: the demo shop database and the demo logins (`up` does this too)."""

import os
import secrets
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand
from django.db import transaction

from accounts.models import Role
from demo import shop
from runs.models import Budget

PASSWORD_ENV = "AGENTOPS_DEMO_PASSWORD"


@dataclass(frozen=True)
class DemoUser:
    username: str
    roles: tuple[str, ...]
    what: str
    superuser: bool = False


DEMO_USERS = (
    DemoUser("operator", (Role.OPERATOR, Role.VIEWER), "launches, watches and cancels runs"),
    DemoUser("approver", (Role.APPROVER, Role.VIEWER), "decides gated actions, answers questions"),
    DemoUser("admin", (Role.ADMIN,), "everything, plus /admin/", superuser=True),
)


@dataclass(frozen=True)
class DemoLogins:
    password: str | None  # None: the users predate the password file, we cannot know it
    created: tuple[str, ...]


def password_file() -> Path:
    return Path(settings.VAR_DIR) / "demo-password"


def ensure_demo_users() -> DemoLogins:
    """Create the demo users that are missing.

    The password comes from AGENTOPS_DEMO_PASSWORD (then it is also applied to existing demo
    users: the environment says what it should be), else from a generated one kept in
    var/demo-password, so restarts print the same login.
    """
    explicit = os.environ.get(PASSWORD_ENV, "")
    stored = password_file()
    User = get_user_model()
    existing = set(
        User.objects.filter(username__in=[u.username for u in DEMO_USERS]).values_list(
            "username", flat=True
        )
    )
    if explicit:
        password: str | None = explicit
    elif stored.exists():
        password = stored.read_text().strip()
    elif existing:
        password = None
    else:
        password = secrets.token_urlsafe(12)
        stored.write_text(password + "\n")
        stored.chmod(0o600)

    created = []
    with transaction.atomic():
        for demo in DEMO_USERS:
            if demo.username in existing:
                if explicit:
                    user = User.objects.get(username=demo.username)
                    user.set_password(explicit)
                    user.save(update_fields=["password"])
                continue
            # An address on a reserved domain: the approval e-mails (with their one-tap
            # decision links) land in the demo outbox for each demo approver.
            user = User(
                username=demo.username,
                email=f"{demo.username}@agentops.localhost",
                is_staff=demo.superuser,
            )
            user.is_superuser = demo.superuser
            # A user created without a known password (see above) cannot log in until an
            # admin or AGENTOPS_DEMO_PASSWORD sets one.
            if password:
                user.set_password(password)
            else:
                user.set_unusable_password()
            user.save()
            user.groups.set([Group.objects.get_or_create(name=role)[0] for role in demo.roles])
            created.append(demo.username)
    return DemoLogins(password=password, created=tuple(created))


# The stock check's paid supplier API (1 cent a call) and its model calls come to about
# 3.6 cents a run: one run of the demo passes the warning threshold (80 %), a second one
# needs an approver's "continue" past 100 % and is stopped at 120 %.
DEMO_BUDGETS = ({"agent": "stock-check", "period": "day", "amount_usd": Decimal("0.04")},)


def ensure_demo_budgets() -> None:
    """The demo's budgets, where the agent has none for that period (an admin's edit stays)."""
    for budget in DEMO_BUDGETS:
        Budget.objects.get_or_create(
            agent=budget["agent"], period=budget["period"], defaults=budget
        )


def describe_logins(logins: DemoLogins) -> str:
    lines = []
    for demo in DEMO_USERS:
        lines.append(f"    {demo.username:<10} {demo.what}")
    if logins.password:
        lines.append(f"  password for all three: {logins.password}")
    else:
        lines.append(f"  password: unchanged (set {PASSWORD_ENV} to reset it)")
    return "\n".join(lines)


class Command(BaseCommand):
    help = "Build the demo shop database and create the demo users (operator, approver, admin)."

    def handle(self, *args, **options) -> None:
        shop.ensure()
        logins = ensure_demo_users()
        ensure_demo_budgets()
        self.stdout.write("Demo logins:\n" + describe_logins(logins))
