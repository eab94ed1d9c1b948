"""runs_step and runs_checkpoint lose their index on run_id alone: UNIQUE(run_id, seq)'s index
leads with run_id and serves every lookup by run, so the other only cost writes and space.

Only the index is dropped (and made again backwards), found by its columns: an AlterField
would rebuild runs_step on SQLite, which fails while the spend trigger reads it and loses the
append-only triggers (0024). The state's AlterField records db_index=False."""

import django.db.models.deletion
from django.db import migrations, models

TABLES = {"step": "runs_step", "checkpoint": "runs_checkpoint"}


def _run_id_indexes(schema_editor, table: str) -> list[str]:
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, table)
    return [
        name
        for name, c in constraints.items()
        if c["index"] and not c["unique"] and not c["primary_key"] and c["columns"] == ["run_id"]
    ]


def drop_run_indexes(apps, schema_editor):
    for model_name, table in TABLES.items():
        model = apps.get_model("runs", model_name)
        for name in _run_id_indexes(schema_editor, table):
            schema_editor.execute(schema_editor._delete_index_sql(model, name))


def make_run_indexes(apps, schema_editor):
    for model_name, table in TABLES.items():
        if _run_id_indexes(schema_editor, table):
            continue
        model = apps.get_model("runs", model_name)
        field = model._meta.get_field("run")
        schema_editor.execute(schema_editor._create_index_sql(model, fields=[field]))


class Migration(migrations.Migration):
    dependencies = [("runs", "0026_run_unsent")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunPython(drop_run_indexes, make_run_indexes, elidable=False)
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="checkpoint",
                    name="run",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="checkpoints",
                        to="runs.run",
                    ),
                ),
                migrations.AlterField(
                    model_name="step",
                    name="run",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="steps",
                        to="runs.run",
                    ),
                ),
            ],
        )
    ]
