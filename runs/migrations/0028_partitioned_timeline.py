"""The timeline partitioned by time, and what its retention needs (Retention, ArchivedRun).

Each step and checkpoint gets `run_created`, its run's created_at. On Postgres runs_step and
runs_checkpoint become range-partitioned by it, a partition per UTC month: a run's whole
timeline lives in one partition, so UNIQUE(run_id, seq, run_created) is as strong as the
UNIQUE(run_id, seq) it replaces (Postgres wants the partition key in every unique constraint
and primary key: the primary key is (id, run_created) in the database, `id` in Django's state,
and UNIQUE(run, seq) stays the state's). The tables are made again and the rows copied, under
an ACCESS EXCLUSIVE lock; the triggers are made on the new tables after the copy (the spend
trigger would count every step twice). Row triggers on a partitioned table are cloned onto
every partition; a TRUNCATE trigger is not, so `agentops_timeline_partition()` (which makes a
month's partitions, runs/retention/partitions.py) gives each partition its own. It is
SECURITY DEFINER: the application's role owns no table (manage.py audit_grants) and still
makes the months ahead from its periodic task. A DEFAULT partition takes rows of a month with
no partition (an imported run from long ago).

Foreign keys to a partitioned table must hold its partition key, so the two that pointed at
these tables by id (Run.forked_from, approvals' PostHocReview.step) keep no constraint in the
database (db_constraint=False; approvals 0017 drops the second before this runs).

On SQLite the tables stay as they are: the column is added and filled from the runs.
"""

import importlib

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

import runs.models

SPEND = importlib.import_module("runs.migrations.0021_spend_counts_every_charged_step")
APPEND_ONLY = importlib.import_module("runs.migrations.0003_steps_append_only")
NO_TRUNCATE = importlib.import_module("runs.migrations.0013_refuse_truncate")
# SQLite rebuilds runs_run to drop forked_from's key, which the spend trigger prevents: 0024's.
COMPENSATION = importlib.import_module("runs.migrations.0024_compensation")

# Months made ahead when migrating; the periodic task keeps TIMELINE_PARTITIONS_AHEAD.
AHEAD = 3

PARTITION_FUNCTION = """
CREATE OR REPLACE FUNCTION agentops_timeline_partition(parent text, month date) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    start timestamptz := date_trunc('month', month)::timestamp AT TIME ZONE 'UTC';
    name text := parent || '_p' || to_char(date_trunc('month', month), 'YYYY_MM');
BEGIN
    IF parent NOT IN ('runs_step', 'runs_checkpoint') THEN
        RAISE EXCEPTION 'not a timeline table: %', parent;
    END IF;
    IF to_regclass(name) IS NULL THEN
        EXECUTE format(
            'CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
            name, parent, start, start + interval '1 month'
        );
        EXECUTE format(
            'CREATE TRIGGER %I BEFORE TRUNCATE ON %I '
            'FOR EACH STATEMENT EXECUTE FUNCTION agentops_refuse_truncate()',
            name || '_no_truncate', name
        );
    END IF;
    RETURN name;
END
$$;
"""

# table: its unique constraint (runs_step is the append-only one)
TABLES = {"runs_step": "step_seq_unique_per_run", "runs_checkpoint": "checkpoint_seq_unique_per_run"}


def _foreign_key(schema_editor, table: str) -> str:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'f'",
            [table],
        )
        return cursor.fetchone()[0]


def _move_aside(schema_editor, table: str, unique: str, to: str) -> str:
    """Rename `table` to `to` with the indexes the new table takes (their names are the
    schema's), holding it locked; returns its foreign key's name (the new table takes it)."""
    ex = schema_editor.execute
    fk = _foreign_key(schema_editor, table)
    ex(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE", params=None)
    ex(f"ALTER TABLE {table} RENAME TO {to}", params=None)
    ex(f"ALTER TABLE {to} RENAME CONSTRAINT {table}_pkey TO {to}_pkey", params=None)
    ex(f"ALTER TABLE {to} RENAME CONSTRAINT {unique} TO {to}_unique", params=None)
    if table == "runs_step":
        ex(f"ALTER INDEX runs_step_created_brin RENAME TO {to}_brin", params=None)
    return fk


def _keys(schema_editor, table: str, unique: str, fk: str, *, partitioned: bool) -> None:
    """The primary key, UNIQUE(run, seq), the run's foreign key and (steps) the BRIN index;
    on the partitioned table the keys hold the partition key."""
    ex = schema_editor.execute
    key = ", run_created" if partitioned else ""
    ex(f"ALTER TABLE {table} ADD CONSTRAINT {table}_pkey PRIMARY KEY (id{key})", params=None)
    ex(f"ALTER TABLE {table} ADD CONSTRAINT {unique} UNIQUE (run_id, seq{key})", params=None)
    ex(
        f"ALTER TABLE {table} ADD CONSTRAINT {fk} FOREIGN KEY (run_id) "
        "REFERENCES runs_run (id) DEFERRABLE INITIALLY DEFERRED",
        params=None,
    )
    if table == "runs_step":
        ex("CREATE INDEX runs_step_created_brin ON runs_step USING brin (created_at)", None)


def _triggers(schema_editor, table: str, *, truncate: bool = True) -> None:
    """The timeline's triggers on the parent table (checkpoints: TRUNCATE refused, from here
    on, like their partitions)."""
    ex = schema_editor.execute
    if truncate:
        ex(NO_TRUNCATE.TRIGGER.replace("runs_step", table), params=None)
    if table == "runs_step":
        ex(APPEND_ONLY.TRIGGER, params=None)
        ex(SPEND.POSTGRES_TRIGGER, params=None)


def partition(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    ex = schema_editor.execute
    ex(PARTITION_FUNCTION, params=None)
    for table, unique in TABLES.items():
        old = f"{table}_unpartitioned"
        fk = _move_aside(schema_editor, table, unique, old)
        ex(
            f"CREATE TABLE {table} (LIKE {old} INCLUDING DEFAULTS INCLUDING CONSTRAINTS, "
            "run_created timestamp with time zone NOT NULL) PARTITION BY RANGE (run_created)",
            params=None,
        )
        _keys(schema_editor, table, unique, fk, partitioned=True)
        ex(f"CREATE TABLE {table}_default PARTITION OF {table} DEFAULT", params=None)
        ex(NO_TRUNCATE.TRIGGER.replace("runs_step", f"{table}_default"), params=None)
        ex(
            f"SELECT agentops_timeline_partition('{table}', m::date) FROM generate_series("
            "date_trunc('month', coalesce((SELECT min(r.created_at) FROM runs_run r "
            f"WHERE EXISTS (SELECT 1 FROM {old} s WHERE s.run_id = r.id)), now()) "
            "AT TIME ZONE 'UTC'), "
            f"date_trunc('month', now() AT TIME ZONE 'UTC') + interval '{AHEAD} months', "
            "interval '1 month') AS m",
            params=None,
        )
        ex(
            f"INSERT INTO {table} SELECT s.*, r.created_at FROM {old} s "
            "JOIN runs_run r ON r.id = s.run_id",
            params=None,
        )
        # The copied rows' deferred foreign-key checks, now: Postgres refuses to ALTER a
        # table with checks pending (the triggers and the id default below).
        ex("SET CONSTRAINTS ALL IMMEDIATE", params=None)
        ex(f"DROP TABLE {old}", params=None)  # its triggers and identity sequence with it
        # Identity columns on a partitioned table come with Postgres 17: a sequence it owns.
        ex(f"CREATE SEQUENCE {table}_id_seq OWNED BY {table}.id", params=None)
        ex(
            f"SELECT setval('{table}_id_seq', coalesce((SELECT max(id) FROM {table}), 0) + 1, "
            "false)",
            params=None,
        )
        ex(f"ALTER TABLE {table} ALTER COLUMN id SET DEFAULT nextval('{table}_id_seq')", None)
        _triggers(schema_editor, table)


def unpartition(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    ex = schema_editor.execute
    for table, unique in TABLES.items():
        append_only = table == "runs_step"
        new = f"{table}_partitioned"
        fk = _move_aside(schema_editor, table, unique, new)
        ex(f"CREATE TABLE {table} (LIKE {new} INCLUDING CONSTRAINTS)", params=None)
        ex(f"ALTER TABLE {table} DROP COLUMN run_created", params=None)
        ex(f"ALTER TABLE {table} ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY", None)
        columns = ", ".join(
            f.column
            for f in apps.get_model("runs", "step" if append_only else "checkpoint")._meta.fields
            if f.column != "run_created"
        )
        ex(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {new}", params=None)
        ex("SET CONSTRAINTS ALL IMMEDIATE", params=None)  # as in partition()
        ex(
            f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
            f"coalesce((SELECT max(id) FROM {table}), 0) + 1, false)",
            params=None,
        )
        ex(f"DROP TABLE {new}", params=None)  # and its partitions and sequence
        _keys(schema_editor, table, unique, fk, partitioned=False)
        _triggers(schema_editor, table, truncate=append_only)
    ex("DROP FUNCTION IF EXISTS agentops_timeline_partition(text, date)", params=None)


def add_column_on_sqlite(apps, schema_editor):
    """A nullable column is added in place (no rebuild), then filled from the runs."""
    if schema_editor.connection.vendor == "postgresql":
        return  # partition() makes it
    for table in TABLES:
        schema_editor.execute(f"ALTER TABLE {table} ADD COLUMN run_created datetime NULL", None)
        schema_editor.execute(
            f"UPDATE {table} SET run_created = "
            f"(SELECT created_at FROM runs_run WHERE runs_run.id = {table}.run_id)",
            params=None,
        )


def drop_column_on_sqlite(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        return  # unpartition() drops it
    for table in TABLES:
        schema_editor.execute(f"ALTER TABLE {table} DROP COLUMN run_created", params=None)


RUN_CREATED = runs.models.RunCreatedField(editable=False, null=True)


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0005_security_keys"),
        ("runs", "0027_step_checkpoint_no_run_index"),
        ("approvals", "0017_posthocreview_step_no_foreign_key"),
    ]

    operations = [
        migrations.RunPython(
            COMPENSATION.drop_spend_trigger, COMPENSATION.make_spend_trigger, elidable=False
        ),
        migrations.AlterField(
            model_name="run",
            name="forked_from",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="runs.checkpoint",
            ),
        ),
        migrations.RunPython(
            COMPENSATION.make_spend_trigger, COMPENSATION.drop_spend_trigger, elidable=False
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(model_name="checkpoint", name="run_created", field=RUN_CREATED),
                migrations.AddField(model_name="step", name="run_created", field=RUN_CREATED),
            ],
            database_operations=[
                migrations.RunPython(add_column_on_sqlite, drop_column_on_sqlite, elidable=False)
            ],
        ),
        migrations.RunPython(partition, unpartition, elidable=False),
        migrations.CreateModel(
            name="ArchivedRun",
            fields=[
                (
                    "run",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="+",
                        serialize=False,
                        to="runs.run",
                    ),
                ),
                (
                    "archive",
                    models.CharField(
                        help_text="The archive file (path on the host).", max_length=500
                    ),
                ),
                ("archive_sha256", models.CharField(max_length=64)),
                ("chain_head", models.CharField(blank=True, max_length=64)),
                ("steps", models.PositiveIntegerField()),
                ("checkpoints", models.PositiveIntegerField()),
                ("archived_at", models.DateTimeField(default=django.utils.timezone.now)),
            ],
        ),
        migrations.CreateModel(
            name="Retention",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("agent", models.CharField(blank=True, max_length=64)),
                (
                    "keep_days",
                    models.PositiveIntegerField(
                        help_text="Days a finished run's timeline stays in the database "
                        "before it is archived."
                    ),
                ),
                ("updated_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "team",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="accounts.team",
                    ),
                ),
            ],
            options={
                "ordering": ["agent", "team__name"],
                "constraints": [
                    models.UniqueConstraint(
                        condition=models.Q(("team__isnull", True)),
                        fields=("agent",),
                        name="retention_one_per_agent",
                    ),
                    models.UniqueConstraint(
                        condition=models.Q(("team__isnull", False)),
                        fields=("team",),
                        name="retention_one_per_team",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(
                                ("team__isnull", True), models.Q(("agent", ""), _negated=True)
                            ),
                            models.Q(("team__isnull", False), ("agent", "")),
                            _connector="OR",
                        ),
                        name="retention_agent_or_team",
                    ),
                ],
            },
        ),
    ]
