"""The "idle" termination reason: an external session that made no call for the idle time
ends (gateway/sessions.py end_idle).

SQLite changes a check constraint of runs_run by rebuilding the table, and the rebuild's
rename fails while a trigger reads it (0021's runs_step_adds_spend): dropped for the rebuild
and made again after it, on SQLite only (as 0024)."""

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
    dependencies = [("runs", "0024_compensation")]

    operations = [
        migrations.RunPython(drop_spend_trigger, make_spend_trigger, elidable=False),
        migrations.RemoveConstraint(
            model_name="run",
            name="run_termination_valid",
        ),
        migrations.AlterField(
            model_name="run",
            name="termination_reason",
            field=models.CharField(
                blank=True,
                choices=[
                    ("completed", "completed"),
                    ("max_steps", "max steps reached"),
                    ("max_cost", "max cost reached"),
                    ("max_seconds", "max wall time reached"),
                    ("consecutive_errors", "too many consecutive errors"),
                    ("no_progress", "no progress (same tool call repeated)"),
                    ("cancelled", "cancelled by an operator"),
                    ("approval_expired", "approval expired"),
                    ("rejected", "action rejected by an approver"),
                    ("llm_error", "model call failed"),
                    ("verification_failed", "verification failed"),
                    ("output_invalid", "output failed validation"),
                    ("blocked", "blocked by a guardrail"),
                    ("pending_timeout", "a pending operation timed out"),
                    ("agent_failed", "the external agent reported a failure"),
                    ("truncated", "the model's answer was cut off"),
                    ("refused", "the model declined to answer"),
                    ("budget", "the agent's budget is spent"),
                    ("compensation_failed", "a compensation was not made"),
                    ("idle", "the external session was idle too long"),
                ],
                max_length=32,
            ),
        ),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("termination_reason", ""),
                    (
                        "termination_reason__in",
                        [
                            "completed",
                            "max_steps",
                            "max_cost",
                            "max_seconds",
                            "consecutive_errors",
                            "no_progress",
                            "cancelled",
                            "approval_expired",
                            "rejected",
                            "llm_error",
                            "verification_failed",
                            "output_invalid",
                            "blocked",
                            "pending_timeout",
                            "agent_failed",
                            "truncated",
                            "refused",
                            "budget",
                            "compensation_failed",
                            "idle",
                        ],
                    ),
                    _connector="OR",
                ),
                name="run_termination_valid",
            ),
        ),
        migrations.RunPython(make_spend_trigger, drop_spend_trigger, elidable=False),
    ]
