"""AgentDaySpend counted only `llm` steps, so the per-agent report missed the other model calls a
run pays for (context summaries, a model verifier's checks) and disagreed with the runs' own
cost. From here on the trigger adds every step that carries a cost, plus every `llm` step (a
free one is still a model call): model calls (llm, summary, verify) count as calls, and a tool
step's cost (a paid API; agentkit.tools) goes to `tool_cost_usd` as well as to the total.

The rows are summed again from the timeline, with inserts of steps held off meanwhile on
Postgres, so no step is counted twice or missed."""

from decimal import Decimal

from django.db import migrations, models

SHARDS = 8
COLUMNS = "agent, day, shard, calls, tokens_in, tokens_out, cost_usd, tool_cost_usd"
ADD = """
    calls = runs_agentdayspend.calls + excluded.calls,
    tokens_in = runs_agentdayspend.tokens_in + excluded.tokens_in,
    tokens_out = runs_agentdayspend.tokens_out + excluded.tokens_out,
    cost_usd = runs_agentdayspend.cost_usd + excluded.cost_usd,
    tool_cost_usd = runs_agentdayspend.tool_cost_usd + excluded.tool_cost_usd
"""
# A step counted: a model call, or any step with a cost (a tool's).
WHEN = "{s}.kind = 'llm' OR {s}.cost_usd <> 0"
CALL = "CASE WHEN {s}.kind = 'tool' THEN 0 ELSE 1 END"
TOOL_COST = "CASE WHEN {s}.kind = 'tool' THEN {s}.cost_usd ELSE 0 END"


def _values(s: str) -> str:
    return (
        f"{CALL.format(s=s)}, {s}.tokens_in, {s}.tokens_out, {s}.cost_usd, {TOOL_COST.format(s=s)}"
    )


POSTGRES_FUNCTION = f"""
CREATE OR REPLACE FUNCTION runs_add_spend() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO runs_agentdayspend ({COLUMNS})
    SELECT r.agent, (NEW.created_at AT TIME ZONE 'UTC')::date,
           ascii(right(NEW.run_id::text, 1)) % {SHARDS}, {_values("NEW")}
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
           {_values("NEW")}
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
SELECT r.agent, {day}, {shard}, sum({call}), sum(s.tokens_in), sum(s.tokens_out),
       sum(s.cost_usd), sum({tool_cost})
FROM runs_step s JOIN runs_run r ON r.id = s.run_id
WHERE {when}
GROUP BY r.agent, {day}, {shard}
"""
DROP_POSTGRES = "DROP TRIGGER IF EXISTS runs_step_adds_spend ON runs_step"
DROP_SQLITE = "DROP TRIGGER IF EXISTS runs_step_adds_spend"

# 0015's, for going back.
OLD_COLUMNS = "agent, day, shard, calls, tokens_in, tokens_out, cost_usd"
OLD_ADD = ADD.rsplit(",", 1)[0]
OLD_POSTGRES_FUNCTION = f"""
CREATE OR REPLACE FUNCTION runs_add_spend() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO runs_agentdayspend ({OLD_COLUMNS})
    SELECT r.agent, (NEW.created_at AT TIME ZONE 'UTC')::date,
           ascii(right(NEW.run_id::text, 1)) % {SHARDS},
           1, NEW.tokens_in, NEW.tokens_out, NEW.cost_usd
    FROM runs_run r WHERE r.id = NEW.run_id
    ON CONFLICT (agent, day, shard) DO UPDATE SET {OLD_ADD};
    RETURN NULL;
END
$$;
"""
OLD_POSTGRES_TRIGGER = """
CREATE TRIGGER runs_step_adds_spend AFTER INSERT ON runs_step
FOR EACH ROW WHEN (NEW.kind = 'llm') EXECUTE FUNCTION runs_add_spend();
"""
OLD_SQLITE_TRIGGER = f"""
CREATE TRIGGER runs_step_adds_spend AFTER INSERT ON runs_step
FOR EACH ROW WHEN NEW.kind = 'llm'
BEGIN
    INSERT INTO runs_agentdayspend ({OLD_COLUMNS})
    SELECT r.agent, date(NEW.created_at), unicode(substr(NEW.run_id, -1)) % {SHARDS},
           1, NEW.tokens_in, NEW.tokens_out, NEW.cost_usd
    FROM runs_run r WHERE r.id = NEW.run_id
    ON CONFLICT (agent, day, shard) DO UPDATE SET {OLD_ADD};
END;
"""


def drop_trigger(apps, schema_editor):
    # Before the new column: SQLite rebuilds the table, which a trigger naming it prevents.
    postgres = schema_editor.connection.vendor == "postgresql"
    schema_editor.execute(DROP_POSTGRES if postgres else DROP_SQLITE, params=None)


def create_old_trigger(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(OLD_POSTGRES_FUNCTION, params=None)
        schema_editor.execute(OLD_POSTGRES_TRIGGER, params=None)
    else:
        schema_editor.execute(OLD_SQLITE_TRIGGER, params=None)


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
        day, shard = POSTGRES_DAY, POSTGRES_SHARD
    else:
        day, shard = SQLITE_DAY, SQLITE_SHARD
    create_trigger(apps, schema_editor)
    schema_editor.execute("DELETE FROM runs_agentdayspend", params=None)
    schema_editor.execute(
        BACKFILL.format(
            columns=COLUMNS,
            day=day,
            shard=shard,
            call=CALL.format(s="s"),
            tool_cost=TOOL_COST.format(s="s"),
            when=WHEN.format(s="s"),
        ),
        params=[],
    )


class Migration(migrations.Migration):
    dependencies = [("runs", "0017_agent_day_spend_storage")]

    operations = [
        migrations.RunPython(drop_trigger, create_old_trigger, elidable=False),
        migrations.AddField(
            model_name="agentdayspend",
            name="tool_cost_usd",
            field=models.DecimalField(decimal_places=6, default=Decimal("0"), max_digits=16),
        ),
        migrations.RunPython(forwards, drop_trigger, elidable=False),
    ]
