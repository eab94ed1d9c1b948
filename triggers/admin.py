"""Webhook secrets (made, shown once, rotated, revoked), their deliveries, and schedules."""

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.utils.html import format_html

from agentkit.signing import ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER
from runs.forms import agent_choices

from . import scheduler
from .models import ROTATION_GRACE, Schedule, WebhookDelivery, WebhookSecret

# Changing any of these starts the schedule over from now.
TIMING_FIELDS = {"cron", "timezone", "interval_seconds", "enabled"}


def _run_link(run) -> str:
    if run is None:
        return "—"
    return format_html('<a href="{}">{}</a>', reverse("runs:detail", args=[run.pk]), run.status)


# --- webhooks ----------------------------------------------------------------------------------
class WebhookSecretForm(forms.ModelForm):
    agent = forms.ChoiceField(choices=agent_choices)

    class Meta:
        model = WebhookSecret
        fields = ["agent", "name", "expires_at"]


@admin.register(WebhookSecret)
class WebhookSecretAdmin(admin.ModelAdmin):
    form = WebhookSecretForm
    list_display = ["agent", "name", "fingerprint", "state", "created_at", "expires_at"]
    list_filter = ["agent"]
    search_fields = ["agent", "name"]
    actions = ["rotate", "revoke"]

    def get_fields(self, request: HttpRequest, obj=None) -> list[str]:
        if obj is None:
            return ["agent", "name", "expires_at"]
        return ["agent", "name", "fingerprint", "created_at", "expires_at", "revoked_at"]

    def get_readonly_fields(self, request: HttpRequest, obj=None) -> list[str]:
        # The secret itself is never a field: it is shown once, by response_add or rotate.
        return [] if obj is None else ["agent", "fingerprint", "created_at", "revoked_at"]

    @admin.display(description="state")
    def state(self, obj: WebhookSecret) -> str:
        if obj.revoked_at:
            return "revoked"
        return "current" if obj.is_usable() else "expired"

    def response_add(self, request: HttpRequest, obj: WebhookSecret, post_url_continue=None):
        return _show_once(request, [obj], self.model._meta)

    @admin.action(description=f"Rotate: a new secret; the current ones expire in {ROTATION_GRACE}")
    def rotate(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse:
        made = []
        for agent in sorted(set(queryset.values_list("agent", flat=True))):
            newest = queryset.filter(agent=agent).order_by("-created_at").first()
            made.append(WebhookSecret.rotate(agent, name=newest.name if newest else ""))
        return _show_once(request, made, self.model._meta)

    @admin.action(description="Revoke now: refuse deliveries signed with them")
    def revoke(self, request: HttpRequest, queryset: QuerySet) -> None:
        done = sum(secret.revoke() for secret in queryset)
        self.message_user(request, f"{done} secret(s) revoked.", messages.SUCCESS)


def _show_once(request: HttpRequest, secrets: list[WebhookSecret], opts) -> HttpResponse:
    """The page that shows new secrets, the one time they are shown. Rendered in the response
    to the POST that made them, never put in a message or a redirect, and never cached."""
    response = TemplateResponse(
        request,
        "admin/triggers/secret_created.html",
        {
            **admin.site.each_context(request),
            "opts": opts,
            "title": "Copy the new webhook secret now",
            "secrets": secrets,
            "id_header": ID_HEADER,
            "timestamp_header": TIMESTAMP_HEADER,
            "signature_header": SIGNATURE_HEADER,
        },
    )
    add_never_cache_headers(response)
    return response


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    """What was received: read-only, like the runs themselves."""

    list_display = ["created_at", "agent", "key", "run_link", "secret", "legacy"]
    list_filter = ["agent", "legacy"]
    search_fields = ["=id", "=key", "=message_id", "agent"]
    list_select_related = ["run", "secret"]
    date_hierarchy = "created_at"

    @admin.display(description="run")
    def run_link(self, obj: WebhookDelivery) -> str:
        return _run_link(obj.run)

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


# --- schedules ---------------------------------------------------------------------------------
class ScheduleForm(forms.ModelForm):
    agent = forms.ChoiceField(choices=agent_choices)

    class Meta:
        model = Schedule
        fields = [
            "name",
            "agent",
            "input",
            "cron",
            "timezone",
            "interval_seconds",
            "enabled",
            "allow_overlap",
        ]


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    form = ScheduleForm
    list_display = [
        "name",
        "agent",
        "description",
        "enabled",
        "next_run_at",
        "last_run_at",
        "last_run_link",
        "last_skip_reason",
    ]
    list_filter = ["enabled", "agent"]
    search_fields = ["name", "agent"]
    list_select_related = ["last_run"]
    readonly_fields = [
        "next_run_at",
        "last_run_at",
        "last_run_link",
        "last_skipped_at",
        "last_skip_reason",
    ]
    actions = ["run_now"]

    @admin.display(description="schedule")
    def description(self, obj: Schedule) -> str:
        return obj.description

    @admin.display(description="last run")
    def last_run_link(self, obj: Schedule) -> str:
        return _run_link(obj.last_run)

    def save_model(self, request: HttpRequest, obj: Schedule, form, change: bool) -> None:
        if not change or TIMING_FIELDS & set(form.changed_data):
            obj.reschedule(timezone.now())
        super().save_model(request, obj, form, change)

    @admin.action(description="Run now (the overlap rule still applies)")
    def run_now(self, request: HttpRequest, queryset: QuerySet) -> None:
        for schedule in queryset:
            run, reason = scheduler.run_now(schedule.pk)
            if run is not None:
                self.message_user(
                    request,
                    format_html(
                        '{}: launched <a href="{}">run {}</a>.',
                        schedule.name,
                        reverse("runs:detail", args=[run.pk]),
                        run.pk,
                    ),
                    messages.SUCCESS,
                )
            else:
                self.message_user(request, f"{schedule.name}: skipped, {reason}.", messages.WARNING)
