"""AgentDaySpend counted only `llm` steps, so the per-agent report missed the other model calls a
run pays for (context summaries, a model verifier's checks) and disagreed with the runs' own
cost. From here on the trigger adds every step that carries a cost, plus every `llm` step (a
free one is still a model call): model calls (llm, summary, verify) count as calls, and a tool
step's cost (a paid API; agentkit.tools) goes to `tool_cost_usd` as well as to the total.
The prompt-cache figures of 0020 are kept, now for every model call.

The rows are summed again from the timeline, with inserts of steps held off meanwhile on
Postgres, so no step is counted twice or missed."""

from decimal import Decimal
from importlib import import_module

from django.db import migrations, models

# 0020's trigger (prompt caching), for going back.
CACHE = import_module("runs.migrations.0020_agent_day_spend_cache_savings")

SHARDS = 8
COLUMNS = (
    "agent, day, shard, calls, tokens_in, tokens_out, cost_usd, tool_cost_usd, "
    "cache_read_tokens, cache_write_tokens, cache_saved_usd"
)
ADD = """
    calls = runs_agentdayspend.calls + excluded.calls,
    tokens_in = runs_agentdayspend.tokens_in + excluded.tokens_in,
    tokens_out = runs_agentdayspend.tokens_out + excluded.tokens_out,
    cost_usd = runs_agentdayspend.cost_usd + excluded.cost_usd,
    tool_cost_usd = runs_agentdayspend.tool_cost_usd + excluded.tool_cost_usd,
    cache_read_tokens = runs_agentdayspend.cache_read_tokens + excluded.cache_read_tokens,
    cache_write_tokens = runs_agentdayspend.cache_write_tokens + excluded.cache_write_tokens,
    cache_saved_usd = runs_agentdayspend.cache_saved_usd + excluded.cache_saved_usd
"""
# A step counted: a model call, or any step with a cost (a tool's).
WHEN = "{s}.kind = 'llm' OR {s}.cost_usd <> 0"
CALL = "CASE WHEN {s}.kind = 'tool' THEN 0 ELSE 1 END"
TOOL_COST = "CASE WHEN {s}.kind = 'tool' THEN {s}.cost_usd ELSE 0 END"


# A model call's cache reads and writes (its usage) and what caching saved on it (0020).
POSTGRES_CACHE = (
    "COALESCE(({s}.data->'usage'->>'cache_read_input_tokens')::bigint, 0)",
    "COALESCE(({s}.data->'usage'->>'cache_creation_input_tokens')::bigint, 0)",
    "COALESCE(({s}.data->>'cache_saved_usd')::numeric, 0)",
)
SQLITE_CACHE = (
    "COALESCE(json_extract({s}.data, '$.usage.cache_read_input_tokens'), 0)",
    "COALESCE(json_extract({s}.data, '$.usage.cache_creation_input_tokens'), 0)",
    "COALESCE(CAST(json_extract({s}.data, '$.cache_saved_usd') AS NUMERIC), 0)",
)


def _values(s: str, cache: tuple[str, ...], *, summed: bool = False) -> str:
    parts = [
        CALL.format(s=s),
        f"{s}.tokens_in",
        f"{s}.tokens_out",
        f"{s}.cost_usd",
        TOOL_COST.format(s=s),
        *(c.format(s=s) for c in cache),
    ]
    return ", ".join(f"sum({p})" if summed else p for p in parts)


POSTGRES_FUNCTION = f"""
CREATE OR REPLACE FUNCTION runs_add_spend() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO runs_agentdayspend ({COLUMNS})
    SELECT r.agent, (NEW.created_at AT TIME ZONE 'UTC')::date,
           ascii(right(NEW.run_id::text, 1)) % {SHARDS}, {_values("NEW", POSTGRES_CACHE)}
    FROM runs_run r WHERE r.id = NEW.run_id
    ON CONFLICT (agent, day, shard) DO UPDATE SET {ADD};
    RETURN NULL;
END
$$;
"""
POSTGRES_TRIGGER = f"""
CREATE TRIGGER runs_step_adds_spend AFTER INSERT ON runs_step
FOR EACH ROW WHEN ({WHEN.format(s="NEW")}) EXECUTE FUNCTION runs_add_spend();
"""
SQLITE_TRIGGER = f"""
CREATE TRIGGER runs_step_adds_spend AFTER INSERT ON runs_step
FOR EACH ROW WHEN {WHEN.format(s="NEW")}
BEGIN
    INSERT INTO runs_agentdayspend ({COLUMNS})
    SELECT r.agent, date(NEW.created_at), unicode(substr(NEW.run_id, -1)) % {SHARDS},
           {_values("NEW", SQLITE_CACHE)}
    FROM runs_run r WHERE r.id = NEW.run_id
    ON CONFLICT (agent, day, shard) DO UPDATE SET {ADD};
END;
"""
POSTGRES_DAY, POSTGRES_SHARD = (
    "(s.created_at AT TIME ZONE 'UTC')::date",
    "ascii(right(s.run_id::text, 1)) %% 8",
)
SQLITE_DAY, SQLITE_SHARD = "date(s.created_at)", "unicode(substr(s.run_id, -1)) %% 8"
BACKFILL = """
INSERT INTO runs_agentdayspend ({columns})
SELECT r.agent, {day}, {shard}, {values}
FROM runs_step s JOIN runs_run r ON r.id = s.run_id
WHERE {when}
GROUP BY r.agent, {day}, {shard}
"""
DROP_POSTGRES = "DROP TRIGGER IF EXISTS runs_step_adds_spend ON runs_step"
DROP_SQLITE = "DROP TRIGGER IF EXISTS runs_step_adds_spend"

# 0020's trigger, for going back: model steps only.
OLD_POSTGRES_TRIGGER = """
CREATE TRIGGER runs_step_adds_spend AFTER INSERT ON runs_step
FOR EACH ROW WHEN (NEW.kind = 'llm') EXECUTE FUNCTION runs_add_spend();
"""


def drop_trigger(apps, schema_editor):
    # Before the new column: SQLite rebuilds the table, which a trigger naming it prevents.
    postgres = schema_editor.connection.vendor == "postgresql"
    schema_editor.execute(DROP_POSTGRES if postgres else DROP_SQLITE, params=None)


def create_old_trigger(apps, schema_editor):
    CACHE._install(schema_editor, with_cache=True)
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(OLD_POSTGRES_TRIGGER, params=None)


def create_trigger(apps, schema_editor):
    """This migration's trigger (a later migration that must drop it for a while, too)."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(POSTGRES_FUNCTION, params=None)
        schema_editor.execute(POSTGRES_TRIGGER, params=None)
    else:
        schema_editor.execute(SQLITE_TRIGGER, params=None)


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        # Steps inserted while the rows are summed again would be in neither.
        schema_editor.execute("LOCK TABLE runs_step IN SHARE MODE", params=None)
        day, shard, cache = POSTGRES_DAY, POSTGRES_SHARD, POSTGRES_CACHE
    else:
        day, shard, cache = SQLITE_DAY, SQLITE_SHARD, SQLITE_CACHE
    create_trigger(apps, schema_editor)
    schema_editor.execute("DELETE FROM runs_agentdayspend", params=None)
    schema_editor.execute(
        BACKFILL.format(
            columns=COLUMNS,
            day=day,
            shard=shard,
            values=_values("s", cache, summed=True),
            when=WHEN.format(s="s"),
        ),
        params=[],
    )


class Migration(migrations.Migration):
    dependencies = [("runs", "0020_agent_day_spend_cache_savings")]

    operations = [
        migrations.RunPython(drop_trigger, create_old_trigger, elidable=False),
        migrations.AddField(
            model_name="agentdayspend",
            name="tool_cost_usd",
            field=models.DecimalField(decimal_places=6, default=Decimal("0"), max_digits=16),
        ),
        migrations.RunPython(forwards, drop_trigger, elidable=False),
    ]
