"""`manage.py audit_grants [--role agentops_app]`: the GRANTs of a least-privilege setup.
Why and how: docs/design/modules.md."""

from django.apps import apps
from django.core.management.base import BaseCommand, CommandError

from approvals.models import Approval, ApprovalVote
from runs.models import Step

ORDINARY = "SELECT, INSERT, UPDATE, DELETE"
# Append-only: the triggers refuse the rest, and the role is not granted it either.
APPEND_ONLY = {
    Step._meta.db_table: "SELECT, INSERT",
    ApprovalVote._meta.db_table: "SELECT, INSERT",
    # Pending approvals are decided, expired or cancelled by an UPDATE; the trigger refuses
    # any change to a decided one.
    Approval._meta.db_table: "SELECT, INSERT, UPDATE",
}
# Written by migrations only.
READ_ONLY = {"django_migrations": "SELECT"}


def tables() -> list[str]:
    found = set(READ_ONLY)
    for model in apps.get_models(include_auto_created=True):
        if model._meta.managed and not model._meta.proxy:
            found.add(model._meta.db_table)
    return sorted(found)


def statements(role: str, schema: str = "public") -> list[str]:
    quoted = _identifier(role)
    out = [
        f"-- Run as the owner of the tables (the role migrations run as), not as {role}.",
        f"REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {quoted};",
        f"GRANT USAGE ON SCHEMA {schema} TO {quoted};",
    ]
    for table in tables():
        privileges = APPEND_ONLY.get(table) or READ_ONLY.get(table) or ORDINARY
        out.append(f"GRANT {privileges} ON TABLE {_identifier(table)} TO {quoted};")
    out += [
        f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {quoted};",
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT {ORDINARY} ON TABLES TO {quoted};",
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT USAGE, SELECT ON SEQUENCES "
        f"TO {quoted};",
    ]
    return out


def _identifier(name: str) -> str:
    if not name.replace("_", "").isalnum() or not name.isascii():
        raise CommandError(f"{name!r} is not a plain SQL identifier")
    return f'"{name}"'


class Command(BaseCommand):
    help = "Print the GRANTs that give the application's role no more than it needs."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--role", default="agentops_app", help="the application's role")
        parser.add_argument("--schema", default="public")

    def handle(self, *args, **options) -> None:
        for line in statements(options["role"], _identifier(options["schema"]).strip('"')):
            self.stdout.write(line)
