"""The application's role as `manage.py audit_grants` sets it up: it runs the engine, and
cannot rewrite, truncate or switch off the audit trail (Postgres only)."""

import uuid
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.db.backends.signals import connection_created
from django.db.utils import DatabaseError

from agentkit.llm.scripted import text, tool_use
from runs.models import Run, Step

from ..conftest import on_postgres
from .harness import drive

pytestmark = [on_postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def app_role():
    """A role granted exactly what audit_grants prints; the connection acts as it."""
    role = f"agentops_app_{uuid.uuid4().hex[:8]}"
    out = StringIO()
    call_command("audit_grants", role=role, stdout=out)
    grants = [line for line in out.getvalue().splitlines() if not line.startswith("--")]
    assert any("runs_step" in line and "SELECT, INSERT ON" in line for line in grants)
    with connection.cursor() as cursor:
        cursor.execute(f'CREATE ROLE "{role}" NOLOGIN')
        for statement in grants:
            cursor.execute(statement)

    def act_as_role(sender, connection, **kwargs) -> None:
        # Every connection the engine opens (or takes from the pool) acts as the role.
        with connection.cursor() as cursor:
            cursor.execute(f'SET ROLE "{role}"')

    connection_created.connect(act_as_role)
    connection.close()
    try:
        yield role
    finally:
        connection_created.disconnect(act_as_role)
        connection.close()
        # Pooled connections keep their role: drop them all before the suite's flush.
        if getattr(connection, "pool", None) is not None:
            connection.close_pool()
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_user")
            assert cursor.fetchone()[0] != role
            cursor.execute(f'DROP OWNED BY "{role}"')
            cursor.execute(f'DROP ROLE "{role}"')


def refused(sql: str, params=None, *, match: str) -> None:
    with (
        pytest.raises(DatabaseError, match=match),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql, params)


def test_the_application_role_runs_a_run_and_cannot_touch_the_trail(app_role, launch, script):
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        assert cursor.fetchone()[0] == app_role
    # What the application does, it can: launch, advance, write steps, checkpoints, ledger.
    script([[tool_use("t_echo", text="a")], [text("done")]])
    run = launch()
    drive(run)
    assert run.status == Run.Status.SUCCEEDED
    assert run.verify_chain() == (True, None)
    step = run.steps.get(seq=2)
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        assert cursor.fetchone()[0] == app_role

    refused(
        "UPDATE runs_step SET data = '{}' WHERE id = %s", [step.pk], match="append-only|permission"
    )
    refused("DELETE FROM runs_step WHERE id = %s", [step.pk], match="append-only|permission")
    for table, trigger in (
        ("runs_step", "runs_step_append_only"),
        ("approvals_approvalvote", "approvals_vote_append_only"),
        ("approvals_approval", "approvals_decided_is_final"),
    ):
        refused(f"TRUNCATE {table} CASCADE", match="permission denied|append-only")
        refused(f"ALTER TABLE {table} DISABLE TRIGGER ALL", match="must be owner")
        refused(f"DROP TRIGGER {trigger} ON {table}", match="must be owner")
    refused("SET session_replication_role = replica", match="permission denied")
    assert Step.objects.get(pk=step.pk).data == step.data
    assert run.verify_chain() == (True, None)
