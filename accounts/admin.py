import logging

from axes.utils import reset as reset_sign_in_failures
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin
from django.db import models

from .models import ApiToken, Team, TeamAgent, TeamMember, User

log = logging.getLogger("agentops.security")


@admin.register(User)
class AgentopsUserAdmin(UserAdmin):
    actions = ["unlock_sign_in"]

    @admin.action(description="Unlock sign-in (forget failed attempts)")
    def unlock_sign_in(self, request, queryset) -> None:
        """What an admin does for someone locked out (django-axes): every recorded failure
        of those usernames, from any address, is forgotten; the unlock is audited."""
        removed = 0
        for user in queryset:
            count = reset_sign_in_failures(username=user.get_username())
            removed += count
            log.warning(
                "sign-in unlocked: username %r by %s (%d attempt records removed)",
                user.get_username(),
                request.user.get_username(),
                count,
                extra={"security_event": "unlock", "username": user.get_username()},
            )
        self.message_user(
            request,
            f"Unlocked {queryset.count()} account(s) ({removed} attempt record(s) removed).",
            messages.SUCCESS,
        )


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "prefix", "created_at", "last_used_at"]
    readonly_fields = ["key_hash", "prefix", "created_at", "last_used_at"]


class TeamAgentInline(admin.TabularInline):
    model = TeamAgent
    extra = 1


class TeamMemberInline(admin.TabularInline):
    model = TeamMember
    extra = 1
    fields = ["user", "launch", "decide", "administer", "from_sso"]
    readonly_fields = ["from_sso"]
    autocomplete_fields = ["user"]


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    """The same rows as the Teams page (/teams/); accounts/teams.py says what they grant."""

    list_display = ["name", "slug", "agent_list"]
    search_fields = ["name", "slug", "agents__agent"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [TeamAgentInline, TeamMemberInline]
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}

    @admin.display(description="agents")
    def agent_list(self, team: Team) -> str:
        return ", ".join(team.agent_slugs)

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("agents")
