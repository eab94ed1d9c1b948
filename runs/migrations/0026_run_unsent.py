"""Run.unsent: a queued run whose message the broker refused (runs/queue.py), sent by the
sweep; Run.resent_at: when the sweep last sent a run again (runs/engine/lease.py). SQLite rebuilds the table for the column, and the rebuild's rename fails while 0021's
runs_step_adds_spend trigger reads it: dropped for the rebuild and made again after it, on
SQLite only (as 0024 does). Postgres adds the column in place."""

import importlib

from django.db import migrations, models

SPEND = importlib.import_module("runs.migrations.0021_spend_counts_every_charged_step")


def drop_spend_trigger(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(SPEND.DROP_SQLITE, params=None)


def make_spend_trigger(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(SPEND.SQLITE_TRIGGER, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0025_external_session_idle"),
    ]

    operations = [
        migrations.RunPython(drop_spend_trigger, make_spend_trigger, elidable=False),
        migrations.AddField(
            model_name="run",
            name="unsent",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="run",
            name="resent_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(make_spend_trigger, drop_spend_trigger, elidable=False),
    ]
