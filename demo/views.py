"""The demo outbox: every e-mail the product sent (agents' e-mails, approval notifications
with their one-tap links), newest first. Admins only: notifications carry other people's
one-tap links."""

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from accounts.requests import SignedInRequest

from .models import OutboxEmail

PER_PAGE = 25


@require_GET
@login_required
def outbox(request: SignedInRequest) -> HttpResponse:
    if not request.user.is_admin:
        raise PermissionDenied
    page = Paginator(OutboxEmail.objects.order_by("-created_at", "-pk"), PER_PAGE).get_page(
        request.GET.get("page")
    )
    return render(request, "demo/outbox.html", {"page": page})
