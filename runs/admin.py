from django.contrib import admin

from .models import ArchivedRun, Checkpoint, Retention, Run, SideEffect, Step


class ReadOnlyAdmin(admin.ModelAdmin):
    """The timeline, checkpoints and ledger are append-only records: never edited by hand."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class StepInline(admin.TabularInline):
    model = Step
    fields = ["seq", "kind", "created_at", "cost_usd", "latency_ms", "hash"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True
    ordering = ["seq"]

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "agent",
        "status",
        "termination_reason",
        "trigger",
        "launched_by",
        "step_count",
        "cost_usd",
        "created_at",
    ]
    list_filter = ["status", "agent", "trigger", "termination_reason"]
    search_fields = ["id", "agent", "output"]
    date_hierarchy = "created_at"
    inlines = [StepInline]


@admin.register(Step)
class StepAdmin(ReadOnlyAdmin):
    list_display = ["run", "seq", "kind", "created_at", "cost_usd"]
    list_filter = ["kind"]
    list_select_related = ["run"]


@admin.register(Checkpoint)
class CheckpointAdmin(ReadOnlyAdmin):
    list_display = ["run", "seq", "created_at"]


@admin.register(SideEffect)
class SideEffectAdmin(ReadOnlyAdmin):
    list_display = ["key", "run", "tool", "status", "attempts", "created_at"]
    list_filter = ["status", "tool"]


@admin.register(ArchivedRun)
class ArchivedRunAdmin(ReadOnlyAdmin):
    """Written by `manage.py archive`, removed by `manage.py restore`."""

    list_display = ["run", "archive", "steps", "checkpoints", "archived_at"]
    search_fields = ["run__id", "archive"]


@admin.register(Retention)
class RetentionAdmin(admin.ModelAdmin):
    """How long finished runs' timelines stay in the database (runs/retention/policy.py)."""

    list_display = ["agent", "team", "keep_days", "updated_at"]
    fields = ["agent", "team", "keep_days"]
