"""On Postgres the database itself refuses UPDATE and DELETE of timeline steps: the hash chain
detects a rewrite, this prevents one by anyone short of a superuser disabling triggers.
(TRUNCATE, used by test flushes, is not a row change and is not refused.)"""

from django.db import migrations

FUNCTION = """
CREATE OR REPLACE FUNCTION agentops_refuse_rewrite() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit trail is append-only: % of a % row refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END
$$;
"""
TRIGGER = """
CREATE TRIGGER runs_step_append_only BEFORE UPDATE OR DELETE ON runs_step
FOR EACH ROW EXECUTE FUNCTION agentops_refuse_rewrite();
"""
DROP = "DROP TRIGGER IF EXISTS runs_step_append_only ON runs_step;"


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FUNCTION, params=None)
        schema_editor.execute(TRIGGER, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP, params=None)


class Migration(migrations.Migration):
    dependencies = [("runs", "0002_hot_updates")]
    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
