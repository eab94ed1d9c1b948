"""Compensation (runs/compensation/models.py), and the compensation trigger and termination reason.

SQLite changes a check constraint of runs_run by rebuilding the table, and the rebuild's
rename fails while a trigger reads it (0021's runs_step_adds_spend): dropped for the rebuild
and made again after it, on SQLite only (as 0019). Postgres changes the constraints in place."""

import importlib

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
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
        ("runs", "0023_team_budgets"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RunPython(drop_spend_trigger, make_spend_trigger, elidable=False),
        migrations.CreateModel(
            name="Compensation",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("tool", models.CharField(max_length=64)),
                ("args", models.JSONField()),
                (
                    "key",
                    models.CharField(
                        help_text="The compensating call's key.", max_length=64, unique=True
                    ),
                ),
                ("attempt", models.PositiveIntegerField(default=1)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("pending", "Pending"),
                            ("compensated", "Compensated"),
                            ("failed", "Failed"),
                        ],
                        default="pending",
                        max_length=16,
                    ),
                ),
                ("automatic", models.BooleanField(default=False)),
                ("result", models.JSONField(blank=True, null=True)),
                ("detail", models.CharField(blank=True, max_length=1000)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("settled_at", models.DateTimeField(blank=True, null=True)),
            ],
            options={
                "ordering": ["created_at", "id"],
            },
        ),
        migrations.RemoveConstraint(
            model_name="run",
            name="run_trigger_valid",
        ),
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
                ],
                max_length=32,
            ),
        ),
        migrations.AlterField(
            model_name="run",
            name="trigger",
            field=models.CharField(
                choices=[
                    ("form", "Form"),
                    ("api", "Api"),
                    ("webhook", "Webhook"),
                    ("schedule", "Schedule"),
                    ("chained", "Chained"),
                    ("fork", "Fork"),
                    ("replay", "Replay"),
                    ("external", "External"),
                    ("compensation", "Compensation"),
                ],
                default="api",
                max_length=16,
            ),
        ),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "trigger__in",
                        [
                            "form",
                            "api",
                            "webhook",
                            "schedule",
                            "chained",
                            "fork",
                            "replay",
                            "external",
                            "compensation",
                        ],
                    )
                ),
                name="run_trigger_valid",
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
                        ],
                    ),
                    _connector="OR",
                ),
                name="run_termination_valid",
            ),
        ),
        migrations.AddField(
            model_name="compensation",
            name="compensating_run",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="compensating",
                to="runs.run",
            ),
        ),
        migrations.AddField(
            model_name="compensation",
            name="effect",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="compensations",
                to="runs.sideeffect",
            ),
        ),
        migrations.AddField(
            model_name="compensation",
            name="requested_by",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddField(
            model_name="compensation",
            name="run",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="compensations",
                to="runs.run",
            ),
        ),
        migrations.AddIndex(
            model_name="compensation",
            index=models.Index(
                condition=models.Q(("status", "pending")),
                fields=["created_at"],
                name="compensation_pending_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="compensation",
            constraint=models.CheckConstraint(
                condition=models.Q(("status__in", ["pending", "compensated", "failed"])),
                name="compensation_status_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="compensation",
            constraint=models.UniqueConstraint(
                condition=models.Q(("status__in", ["pending", "compensated"])),
                fields=("effect",),
                name="compensation_once_per_effect",
            ),
        ),
        migrations.RunPython(make_spend_trigger, drop_spend_trigger, elidable=False),
    ]
