"""The schedules page: what runs on its own, when it runs next, and how it went last time;
and which agents take signed webhooks, by secret fingerprint (never the secret)."""

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from accounts.requests import SignedInRequest

from .models import Schedule, WebhookSecret


@require_GET
@login_required
def schedule_list(request: SignedInRequest) -> HttpResponse:
    # Any role may read (like runs); schedules are made and changed in the admin.
    if not request.user.can_view:
        raise PermissionDenied
    schedules = Schedule.objects.visible_to(request.user).select_related("last_run")
    secrets = WebhookSecret.objects.visible_to(request.user).order_by("agent", "-created_at")
    schedules = schedules.order_by("name")
    return render(request, "triggers/schedules.html", {"schedules": schedules, "secrets": secrets})
