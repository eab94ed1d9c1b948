"""On Postgres the database itself refuses rewriting decisions: a vote (who decided what) is
never updated or deleted, and an approval, once decided, never changes again. Pending
approvals are updated as they are decided, expired or cancelled."""

from django.db import migrations

TRIGGERS = """
CREATE TRIGGER approvals_vote_append_only BEFORE UPDATE OR DELETE ON approvals_approvalvote
FOR EACH ROW EXECUTE FUNCTION agentops_refuse_rewrite();
CREATE TRIGGER approvals_decided_is_final BEFORE UPDATE OR DELETE ON approvals_approval
FOR EACH ROW WHEN (OLD.status <> 'pending') EXECUTE FUNCTION agentops_refuse_rewrite();
"""
DROP = """
DROP TRIGGER IF EXISTS approvals_vote_append_only ON approvals_approvalvote;
DROP TRIGGER IF EXISTS approvals_decided_is_final ON approvals_approval;
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(TRIGGERS, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0003_approval_cancelled_with_run"),
        # The function the triggers call.
        ("runs", "0003_steps_append_only"),
    ]
    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
