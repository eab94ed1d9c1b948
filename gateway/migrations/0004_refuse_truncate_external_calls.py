"""On Postgres, TRUNCATE of the external agents' calls is refused as that of the timeline is
(runs/migrations/0013_refuse_truncate.py): a call row is what an external agent proposed, the
approval it waited for and what it reported happened, the evidence of an external session
beside its timeline."""

from django.db import migrations

TRIGGER = """
CREATE TRIGGER gateway_externalcall_no_truncate BEFORE TRUNCATE ON gateway_externalcall
FOR EACH STATEMENT EXECUTE FUNCTION agentops_refuse_truncate();
"""
DROP = "DROP TRIGGER IF EXISTS gateway_externalcall_no_truncate ON gateway_externalcall;"


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(TRIGGER, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("gateway", "0003_externalcall_client_key_and_withdrawal"),
        # The function the trigger calls.
        ("runs", "0013_refuse_truncate"),
    ]
    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
