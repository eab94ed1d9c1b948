import logging

from axes.utils import reset as reset_sign_in_failures
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin
from django.db import models, transaction
from django_otp import devices_for_user

from .models import ApiToken, Team, TeamAgent, TeamMember, User, WebAuthnCredential

log = logging.getLogger("agentops.security")


@admin.register(User)
class AgentopsUserAdmin(UserAdmin):
    actions = ["unlock_sign_in", "reset_two_factor"]

    @admin.action(description="Reset two-factor sign-in (remove app, keys, recovery codes)")
    def reset_two_factor(self, request, queryset) -> None:
        """For someone who lost their phone or key and their recovery codes: every second
        factor of theirs goes, so their password alone signs them in (and, where
        AGENTOPS_MFA_REQUIRED covers them, they must enrol again at once). Who did it is kept
        twice: the security log and the user's admin history."""
        for user in queryset:
            with transaction.atomic():
                removed = [device.delete() for device in devices_for_user(user, confirmed=None)]
            log.warning(
                "two-factor sign-in reset: username %r by %s (%d device(s) removed)",
                user.get_username(),
                request.user.get_username(),
                len(removed),
                extra={"security_event": "mfa_reset", "username": user.get_username()},
            )
            self.log_change(
                request, user, f"Reset two-factor sign-in ({len(removed)} device(s) removed)"
            )
        self.message_user(
            request,
            f"Reset two-factor sign-in of {queryset.count()} account(s).",
            messages.SUCCESS,
        )

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


@admin.register(WebAuthnCredential)
class WebAuthnCredentialAdmin(admin.ModelAdmin):
    """Security keys: listed and removable (a lost one); added only by their owner's browser."""

    list_display = ["name", "user", "created_at", "last_used_at", "sign_count"]
    search_fields = ["user__username", "name"]
    readonly_fields = ["credential_id", "sign_count", "transports", "created_at", "last_used_at"]
    exclude = ["public_key"]

    def has_add_permission(self, request) -> bool:
        return False


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


if not settings.SSO_ENABLED:
    # allauth's apps are installed whatever the settings, for their tables (agentops/settings.py);
    # without single sign-on their records mean nothing and are not offered for editing.
    from allauth.account.models import EmailAddress
    from allauth.socialaccount.models import SocialAccount, SocialApp, SocialToken

    for _model in (EmailAddress, SocialAccount, SocialApp, SocialToken):
        if admin.site.is_registered(_model):
            admin.site.unregister(_model)
