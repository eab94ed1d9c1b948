from django.contrib import admin

from .models import Delegation, SlackUser


@admin.register(SlackUser)
class SlackUserAdmin(admin.ModelAdmin):
    """Which agentops user each Slack user is (the Slack app decides as them)."""

    list_display = ["team_id", "slack_id", "user", "created_at"]
    search_fields = ["slack_id", "user__username"]


@admin.register(Delegation)
class DelegationAdmin(admin.ModelAdmin):
    list_display = ["user", "delegate", "starts", "ends"]
