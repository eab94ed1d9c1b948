"""On Postgres, TRUNCATE of the plans and of the one-tap decision links is refused as that of
the decisions is (0010): an approved plan is what let its run's calls through without asking
anyone again, and a link records through which door a decision came. Both are part of the
evidence of who allowed what. See runs/migrations/0013_refuse_truncate.py."""

from django.db import migrations

TRIGGERS = """
CREATE TRIGGER approvals_plan_no_truncate BEFORE TRUNCATE ON approvals_plan
FOR EACH STATEMENT EXECUTE FUNCTION agentops_refuse_truncate();
CREATE TRIGGER approvals_decisionlink_no_truncate BEFORE TRUNCATE ON approvals_decisionlink
FOR EACH STATEMENT EXECUTE FUNCTION agentops_refuse_truncate();
"""
DROP = """
DROP TRIGGER IF EXISTS approvals_plan_no_truncate ON approvals_plan;
DROP TRIGGER IF EXISTS approvals_decisionlink_no_truncate ON approvals_decisionlink;
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(TRIGGERS, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0015_plans"),
        # The function the triggers call.
        ("runs", "0013_refuse_truncate"),
    ]
    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
