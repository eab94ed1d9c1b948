from django.contrib import admin

from .models import OutboxEmail, Refund


@admin.register(Refund)
class RefundAdmin(admin.ModelAdmin):
    list_display = ["order_id", "amount", "created_at", "run_id"]
    readonly_fields = [f.name for f in Refund._meta.fields]


@admin.register(OutboxEmail)
class OutboxEmailAdmin(admin.ModelAdmin):
    list_display = ["subject", "to", "created_at"]
    readonly_fields = [f.name for f in OutboxEmail._meta.fields]
