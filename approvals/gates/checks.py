"""The gate configuration's system checks (approvals/apps.py registers them), and the one
query they and a session's registration need: which named approvers have an account. The
rules themselves are approvals/gates/config.py's, which imports no model."""

from django.contrib.auth import get_user_model
from django.core import checks
from django.db import DatabaseError

from agentkit.agents import CATALOGUE

from .config import named_users, problems


def existing_users(names: set[str]) -> set[str]:
    """Which of `names` are active accounts (one query)."""
    if not names:
        return set()
    users = get_user_model().objects.filter(username__in=names, is_active=True)
    return set(users.values_list("username", flat=True))


def check_catalogue(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """The system check: every agent of the catalogue has a gate configuration that means
    what it says (approvals.E001 names the agent and the rule)."""
    errors: list[checks.CheckMessage] = []
    for slug, agent in sorted(CATALOGUE.items()):
        try:
            snapshot = agent.snapshot()
        except Exception as exc:  # a tool missing from the registry, and the like
            found = [f"its configuration cannot be read: {exc}"]
        else:
            found = problems(snapshot)
        errors += [
            checks.Error(
                f"agent {slug!r}: {problem}",
                hint="Fix the agent's GateRules: a rule that names nothing gates nothing.",
                obj=slug,
                id="approvals.E001",
            )
            for problem in found
        ]
    return errors


def check_named_approvers(app_configs=None, databases=None, **kwargs) -> list[checks.CheckMessage]:
    """A database check (`manage.py check --database default`, and `migrate`): an agent of
    the catalogue that names an approver or escalation user without an active account
    (approvals.W002). Gates still open; such a person is simply never asked. A warning, not an
    error: accounts may come after the deploy (SSO, an admin adding them). Silent on a fresh
    install (no account yet) and before the tables exist."""
    if not databases:
        return []
    wanted = {slug: named_users(agent.gates.as_dict()) for slug, agent in CATALOGUE.items()}
    try:
        users = get_user_model().objects
        if not users.exists():
            return []
        found = existing_users(set().union(*wanted.values()))
    except DatabaseError:
        return []
    return [
        checks.Warning(
            f"agent {slug!r} names approver {name!r}, who has no active account",
            hint="Create the account (or fix the name): until then nobody named can decide.",
            obj=slug,
            id="approvals.W002",
        )
        for slug, names in sorted(wanted.items())
        for name in sorted(names - found)
    ]
