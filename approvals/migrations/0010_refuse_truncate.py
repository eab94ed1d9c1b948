"""On Postgres, TRUNCATE of the decisions is refused as their rewrite is (0004): who decided
what is the other half of the audit trail. See runs/migrations/0013_refuse_truncate.py."""

from django.db import migrations

TRIGGERS = """
CREATE TRIGGER approvals_vote_no_truncate BEFORE TRUNCATE ON approvals_approvalvote
FOR EACH STATEMENT EXECUTE FUNCTION agentops_refuse_truncate();
CREATE TRIGGER approvals_approval_no_truncate BEFORE TRUNCATE ON approvals_approval
FOR EACH STATEMENT EXECUTE FUNCTION agentops_refuse_truncate();
"""
DROP = """
DROP TRIGGER IF EXISTS approvals_vote_no_truncate ON approvals_approvalvote;
DROP TRIGGER IF EXISTS approvals_approval_no_truncate ON approvals_approval;
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(TRIGGERS, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0009_approval_watch"),
        # The function the triggers call.
        ("runs", "0013_refuse_truncate"),
    ]
    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
