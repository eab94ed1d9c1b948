from django.contrib import admin

from .models import Case, Dataset, RegressionRun


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    list_display = ["name", "agent", "created_by", "created_at"]
    search_fields = ["name", "agent"]


@admin.register(Case)
class CaseAdmin(admin.ModelAdmin):
    list_display = ["pk", "dataset", "verdict", "tool", "decided_by", "added_at"]
    list_filter = ["verdict"]
    raw_id_fields = ["source_run", "source_approval"]


@admin.register(RegressionRun)
class RegressionRunAdmin(admin.ModelAdmin):
    list_display = ["pk", "dataset", "agent", "fingerprint", "passed", "cases", "started_at"]
