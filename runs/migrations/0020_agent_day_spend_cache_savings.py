"""Prompt caching in the spend per agent and day: the trigger of 0015 also adds each model
step's cache reads and writes (its data's usage) and what caching saved on it (its data's
cache_saved_usd, runs/engine/model.py). Steps recorded before count nothing saved."""

from decimal import Decimal

from django.db import migrations, models

SHARDS = 8
OLD_COLUMNS = "agent, day, shard, calls, tokens_in, tokens_out, cost_usd"
COLUMNS = f"{OLD_COLUMNS}, cache_read_tokens, cache_write_tokens, cache_saved_usd"
OLD_ADD = """
    calls = runs_agentdayspend.calls + excluded.calls,
    tokens_in = runs_agentdayspend.tokens_in + excluded.tokens_in,
    tokens_out = runs_agentdayspend.tokens_out + excluded.tokens_out,
    cost_usd = runs_agentdayspend.cost_usd + excluded.cost_usd
"""
ADD = (
    OLD_ADD
    + """,
    cache_read_tokens = runs_agentdayspend.cache_read_tokens + excluded.cache_read_tokens,
    cache_write_tokens = runs_agentdayspend.cache_write_tokens + excluded.cache_write_tokens,
    cache_saved_usd = runs_agentdayspend.cache_saved_usd + excluded.cache_saved_usd
"""
)
POSTGRES_CACHE = """,
           COALESCE((NEW.data->'usage'->>'cache_read_input_tokens')::bigint, 0),
           COALESCE((NEW.data->'usage'->>'cache_creation_input_tokens')::bigint, 0),
           COALESCE((NEW.data->>'cache_saved_usd')::numeric, 0)"""
SQLITE_CACHE = """,
           COALESCE(json_extract(NEW.data, '$.usage.cache_read_input_tokens'), 0),
           COALESCE(json_extract(NEW.data, '$.usage.cache_creation_input_tokens'), 0),
           COALESCE(CAST(json_extract(NEW.data, '$.cache_saved_usd') AS NUMERIC), 0)"""


def postgres_function(columns: str, cache: str, add: str) -> str:
    return f"""
CREATE OR REPLACE FUNCTION runs_add_spend() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO runs_agentdayspend ({columns})
    SELECT r.agent, (NEW.created_at AT TIME ZONE 'UTC')::date,
           ascii(right(NEW.run_id::text, 1)) % {SHARDS},
           1, NEW.tokens_in, NEW.tokens_out, NEW.cost_usd{cache}
    FROM runs_run r WHERE r.id = NEW.run_id
    ON CONFLICT (agent, day, shard) DO UPDATE SET {add};
    RETURN NULL;
END
$$;
"""


def sqlite_trigger(columns: str, cache: str, add: str) -> str:
    return f"""
CREATE TRIGGER runs_step_adds_spend AFTER INSERT ON runs_step
FOR EACH ROW WHEN NEW.kind = 'llm'
BEGIN
    INSERT INTO runs_agentdayspend ({columns})
    SELECT r.agent, date(NEW.created_at), unicode(substr(NEW.run_id, -1)) % {SHARDS},
           1, NEW.tokens_in, NEW.tokens_out, NEW.cost_usd{cache}
    FROM runs_run r WHERE r.id = NEW.run_id
    ON CONFLICT (agent, day, shard) DO UPDATE SET {add};
END;
"""


def _install(schema_editor, *, with_cache: bool) -> None:
    columns, add = (COLUMNS, ADD) if with_cache else (OLD_COLUMNS, OLD_ADD)
    if schema_editor.connection.vendor == "postgresql":
        cache = POSTGRES_CACHE if with_cache else ""
        schema_editor.execute(postgres_function(columns, cache, add), params=None)
    else:
        cache = SQLITE_CACHE if with_cache else ""
        schema_editor.execute("DROP TRIGGER IF EXISTS runs_step_adds_spend", params=None)
        schema_editor.execute(sqlite_trigger(columns, cache, add), params=None)


def _drop_sqlite_trigger(schema_editor) -> None:
    # SQLite adds a column by copying the table to a new one: a trigger naming the table
    # fails that copy's rename. Postgres adds columns in place.
    if schema_editor.connection.vendor != "postgresql":
        schema_editor.execute("DROP TRIGGER IF EXISTS runs_step_adds_spend", params=None)


def before(apps, schema_editor):
    _drop_sqlite_trigger(schema_editor)


def after(apps, schema_editor):
    _install(schema_editor, with_cache=True)


def undo_after(apps, schema_editor):
    _drop_sqlite_trigger(schema_editor)


def undo_before(apps, schema_editor):
    _install(schema_editor, with_cache=False)


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0019_run_traceparent"),
    ]

    operations = [
        migrations.RunPython(before, undo_before, elidable=False),
        migrations.AddField(
            model_name="agentdayspend",
            name="cache_read_tokens",
            field=models.BigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="agentdayspend",
            name="cache_saved_usd",
            field=models.DecimalField(decimal_places=6, default=Decimal("0"), max_digits=16),
        ),
        migrations.AddField(
            model_name="agentdayspend",
            name="cache_write_tokens",
            field=models.BigIntegerField(default=0),
        ),
        migrations.RunPython(after, undo_after, elidable=False),
    ]
