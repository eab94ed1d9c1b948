import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0004_default_team_for_existing_installs'),
        ('runs', '0022_budgets'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='budget',
            options={'ordering': ['agent', 'team__name', 'period']},
        ),
        migrations.RemoveConstraint(
            model_name='budget',
            name='budget_one_per_agent_period',
        ),
        migrations.AlterField(
            model_name='budget',
            name='agent',
            field=models.CharField(blank=True, max_length=64),
        ),
        # The old `team` column was a placeholder nothing wrote: dropped and added as a key.
        migrations.RemoveField(model_name='budget', name='team'),
        migrations.AddField(
            model_name='budget',
            name='team',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='budgets', to='accounts.team'),
        ),
        migrations.AddConstraint(
            model_name='budget',
            constraint=models.UniqueConstraint(condition=models.Q(('team__isnull', True)), fields=('agent', 'period'), name='budget_one_per_agent_period', violation_error_message='This agent already has a budget for this period.'),
        ),
        migrations.AddConstraint(
            model_name='budget',
            constraint=models.UniqueConstraint(condition=models.Q(('team__isnull', False)), fields=('team', 'period'), name='budget_one_per_team_period', violation_error_message='This team already has a budget for this period.'),
        ),
        migrations.AddConstraint(
            model_name='budget',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('team__isnull', True), models.Q(('agent', ''), _negated=True)), models.Q(('team__isnull', False), ('agent', '')), _connector='OR'), name='budget_agent_or_team', violation_error_message="A budget is either an agent's or a team's: name one."),
        ),
    ]
