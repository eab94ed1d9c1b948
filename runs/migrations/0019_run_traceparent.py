"""Run.traceparent: the run's OpenTelemetry context (agentkit/tracing.py).

SQLite adds a NOT NULL column by rebuilding the table, and the rebuild's rename of runs_run
fails while a trigger reads it (0015's runs_step_adds_spend): dropped for the rebuild and made
again after it, on SQLite only. Postgres adds the column in place."""

import importlib

from django.db import migrations, models

SPEND = importlib.import_module("runs.migrations.0015_agent_day_spend")


def drop_spend_trigger(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute("DROP TRIGGER IF EXISTS runs_step_adds_spend", params=None)


def make_spend_trigger(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(SPEND.SQLITE_TRIGGER, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0018_operator_steering"),
    ]

    operations = [
        migrations.RunPython(drop_spend_trigger, make_spend_trigger, elidable=False),
        migrations.AddField(
            model_name="run",
            name="traceparent",
            field=models.CharField(blank=True, default="", max_length=120),
        ),
        migrations.RunPython(make_spend_trigger, drop_spend_trigger, elidable=False),
    ]
