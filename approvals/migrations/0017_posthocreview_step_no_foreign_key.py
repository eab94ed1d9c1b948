"""PostHocReview.step keeps no foreign key in the database: runs 0028 partitions runs_step,
and a key to a partitioned table must hold its partition key (the run's creation time)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0016_refuse_truncate_plans_and_links"),
        ("runs", "0027_step_checkpoint_no_run_index"),
    ]

    operations = [
        migrations.AlterField(
            model_name="posthocreview",
            name="step",
            field=models.OneToOneField(
                db_constraint=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="runs.step",
            ),
        ),
    ]
