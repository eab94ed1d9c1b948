"""An install that already has users gets one team, "Everyone", owning every agent it knows
(the catalogue, external agents, and any agent a past run names) with every user in it holding
their global role's powers: nobody gains or loses anything until an admin splits the team.
A fresh install gets no team: an agent in no team is reached through the global roles."""

from django.db import migrations

from agentkit.agents import CATALOGUE


def create_default_team(apps, schema_editor):
    User = apps.get_model("accounts", "User")
    if not User.objects.exists():
        return
    Team = apps.get_model("accounts", "Team")
    TeamAgent = apps.get_model("accounts", "TeamAgent")
    TeamMember = apps.get_model("accounts", "TeamMember")
    Run = apps.get_model("runs", "Run")
    ExternalAgent = apps.get_model("gateway", "ExternalAgent")
    agents = set(CATALOGUE)
    agents |= set(Run.objects.order_by().values_list("agent", flat=True).distinct())
    agents |= set(ExternalAgent.objects.values_list("slug", flat=True))
    team, _ = Team.objects.get_or_create(slug="everyone", defaults={"name": "Everyone"})
    TeamAgent.objects.bulk_create(
        [TeamAgent(team=team, agent=a) for a in sorted(agents)], ignore_conflicts=True
    )
    for user in User.objects.prefetch_related("groups"):
        roles = {g.name for g in user.groups.all()}
        admin = user.is_superuser or "admin" in roles
        TeamMember.objects.get_or_create(
            team=team,
            user=user,
            defaults={
                "launch": admin or "operator" in roles,
                "decide": admin or "approver" in roles,
                "administer": admin,
            },
        )


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0003_teams"),
        ("runs", "0017_agent_day_spend_storage"),
        ("gateway", "0003_externalcall_client_key_and_withdrawal"),
    ]
    operations = [migrations.RunPython(create_default_team, migrations.RunPython.noop)]
