"""AgentDaySpend's rows are updated by every model step (the trigger of 0015): on Postgres each
update leaves a dead row version. Room left on each page (fillfactor) lets the updates stay on
their page without new index entries (HOT), and the table is vacuumed after every thousand
dead rows rather than after a fifth of a table this small (a burst of a million steps left 61
000 dead versions of 608 rows, and the dashboard's read of them took 20 ms instead of 1)."""

from django.db import migrations

SETTINGS = (
    "fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,"
    " autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 1000"
)


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE runs_agentdayspend SET ({SETTINGS})", params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        names = ", ".join(part.split("=")[0].strip() for part in SETTINGS.split(","))
        schema_editor.execute(f"ALTER TABLE runs_agentdayspend RESET ({names})", params=None)


class Migration(migrations.Migration):
    dependencies = [("runs", "0016_mask_input_summaries")]
    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
