"""Spend per agent and UTC day kept by the database (runs.models.AgentDaySpend): a trigger on
the insert of each model step adds it to its agent's day, in one of 8 shard rows picked from
the run id's last hex digit (the same on Postgres, where it is a uuid, and on SQLite, 32 hex
digits). The rows for the steps already recorded are summed once, here; the index that served
the sum over the steps goes."""

from decimal import Decimal

from django.db import migrations, models

SHARDS = 8
COLUMNS = "agent, day, shard, calls, tokens_in, tokens_out, cost_usd"
ADD = """
    calls = runs_agentdayspend.calls + excluded.calls,
    tokens_in = runs_agentdayspend.tokens_in + excluded.tokens_in,
    tokens_out = runs_agentdayspend.tokens_out + excluded.tokens_out,
    cost_usd = runs_agentdayspend.cost_usd + excluded.cost_usd
"""
POSTGRES_DAY, POSTGRES_SHARD = (
    "(s.created_at AT TIME ZONE 'UTC')::date",
    "ascii(right(s.run_id::text, 1)) %% 8",
)
SQLITE_DAY, SQLITE_SHARD = "date(s.created_at)", "unicode(substr(s.run_id, -1)) %% 8"

POSTGRES_FUNCTION = f"""
CREATE OR REPLACE FUNCTION runs_add_spend() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO runs_agentdayspend ({COLUMNS})
    SELECT r.agent, (NEW.created_at AT TIME ZONE 'UTC')::date,
           ascii(right(NEW.run_id::text, 1)) % {SHARDS},
           1, NEW.tokens_in, NEW.tokens_out, NEW.cost_usd
    FROM runs_run r WHERE r.id = NEW.run_id
    ON CONFLICT (agent, day, shard) DO UPDATE SET {ADD};
    RETURN NULL;
END
$$;
"""
POSTGRES_TRIGGER = """
CREATE TRIGGER runs_step_adds_spend AFTER INSERT ON runs_step
FOR EACH ROW WHEN (NEW.kind = 'llm') EXECUTE FUNCTION runs_add_spend();
"""
SQLITE_TRIGGER = f"""
CREATE TRIGGER runs_step_adds_spend AFTER INSERT ON runs_step
FOR EACH ROW WHEN NEW.kind = 'llm'
BEGIN
    INSERT INTO runs_agentdayspend ({COLUMNS})
    SELECT r.agent, date(NEW.created_at), unicode(substr(NEW.run_id, -1)) % {SHARDS},
           1, NEW.tokens_in, NEW.tokens_out, NEW.cost_usd
    FROM runs_run r WHERE r.id = NEW.run_id
    ON CONFLICT (agent, day, shard) DO UPDATE SET {ADD};
END;
"""
BACKFILL = """
INSERT INTO runs_agentdayspend ({columns})
SELECT r.agent, {day}, {shard}, count(*), sum(s.tokens_in), sum(s.tokens_out), sum(s.cost_usd)
FROM runs_step s JOIN runs_run r ON r.id = s.run_id
WHERE s.kind = 'llm'
GROUP BY r.agent, {day}, {shard}
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        day, shard = POSTGRES_DAY, POSTGRES_SHARD
        schema_editor.execute(POSTGRES_FUNCTION, params=None)
        schema_editor.execute(POSTGRES_TRIGGER, params=None)
    else:
        day, shard = SQLITE_DAY, SQLITE_SHARD
        schema_editor.execute(SQLITE_TRIGGER, params=None)
    # After the trigger: on Postgres it locks out inserts until commit, so each step is
    # either summed here or added by the trigger, never both.
    schema_editor.execute(BACKFILL.format(columns=COLUMNS, day=day, shard=shard), params=[])


def backwards(apps, schema_editor):
    schema_editor.execute(
        "DROP TRIGGER IF EXISTS runs_step_adds_spend ON runs_step"
        if schema_editor.connection.vendor == "postgresql"
        else "DROP TRIGGER IF EXISTS runs_step_adds_spend",
        params=None,
    )


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0014_model_stop_reasons"),
    ]

    operations = [
        migrations.CreateModel(
            name="AgentDaySpend",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("agent", models.CharField(max_length=64)),
                ("day", models.DateField()),
                ("shard", models.PositiveSmallIntegerField()),
                ("calls", models.PositiveIntegerField(default=0)),
                ("tokens_in", models.BigIntegerField(default=0)),
                ("tokens_out", models.BigIntegerField(default=0)),
                (
                    "cost_usd",
                    models.DecimalField(decimal_places=6, default=Decimal("0"), max_digits=16),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["day"], name="runs_spend_day_idx")],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("agent", "day", "shard"), name="spend_agent_day_shard"
                    )
                ],
            },
        ),
        migrations.RunPython(forwards, backwards, elidable=False),
        # It served only the sum over model steps that the rows above replace.
        migrations.RemoveIndex(model_name="step", name="runs_step_llm_created_idx"),
    ]
