"""External agents in the admin: their gate rules (validated JSON) and registered tools.

Tokens are issued with `manage.py issue_agent_token <slug>` (printed once); the admin shows
only the token's first characters and when it was issued, and "rotate" is issuing again.
"""

from django.contrib import admin

from .models import ExternalAgent, ExternalTool


class ExternalToolInline(admin.TabularInline):
    model = ExternalTool
    extra = 0
    fields = ["name", "description", "reversible", "blast", "input_schema"]


@admin.register(ExternalAgent)
class ExternalAgentAdmin(admin.ModelAdmin):
    list_display = ["slug", "title", "active", "token_prefix", "token_issued_at"]
    search_fields = ["slug", "title"]
    readonly_fields = ["token_prefix", "token_issued_at", "created_at"]
    inlines = [ExternalToolInline]
