"""On Postgres, TRUNCATE of the timeline is refused too: it is not a row change, so the
row triggers of 0003 never saw it, and `TRUNCATE runs_step CASCADE` emptied every timeline.
A statement-level trigger refuses it (the tables it cascades to fire theirs as well). Only a
superuser gets past it (session_replication_role = replica turns triggers off), which is what
the test suite's flush does (agentops/db/postgresql/base.py); the least-privilege application
role (`manage.py audit_grants`) holds no TRUNCATE privilege and owns no table, so it can
neither truncate nor disable the trigger."""

from django.db import migrations

FUNCTION = """
CREATE OR REPLACE FUNCTION agentops_refuse_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit trail is append-only: TRUNCATE of % refused', TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END
$$;
"""
TRIGGER = """
CREATE TRIGGER runs_step_no_truncate BEFORE TRUNCATE ON runs_step
FOR EACH STATEMENT EXECUTE FUNCTION agentops_refuse_truncate();
"""
DROP = """
DROP TRIGGER IF EXISTS runs_step_no_truncate ON runs_step;
DROP FUNCTION IF EXISTS agentops_refuse_truncate();
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FUNCTION, params=None)
        schema_editor.execute(TRIGGER, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP, params=None)


class Migration(migrations.Migration):
    dependencies = [("runs", "0012_external_trigger")]
    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
