"""The compliance export for admins: a page linked from the audit area, whose form downloads
the signed file (approvals/evidence_export.py). A download is a read: GET, no CSRF needed."""

from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from agentkit.agents import CATALOGUE

from . import evidence_export
from .evidence_export import ExportError

TEMPLATE = "approvals/decisions_export.html"


@require_GET
@login_required
def decisions_export(request: HttpRequest) -> HttpResponse:
    if not request.user.is_admin:
        raise PermissionDenied
    query = request.GET
    today = timezone.now().date()
    form = {
        "since": query.get("since", (today - timedelta(days=30)).isoformat()),
        "until": query.get("until", today.isoformat()),
        "format": query.get("format", "csv"),
        "agent": query.get("agent", ""),
    }
    context = {"form": form, "agents": sorted(CATALOGUE), "error": ""}
    if "download" not in query:
        return render(request, TEMPLATE, context)
    try:
        since, until, fmt, agent = evidence_export.checked_request(
            form["since"], form["until"], form["format"], form["agent"]
        )
    except ExportError as exc:
        return render(request, TEMPLATE, {**context, "error": str(exc)}, status=400)
    return download(since=since, until=until, fmt=fmt, agent=agent)


def download(*, since, until, fmt: str, agent: str) -> StreamingHttpResponse:
    """The export as a streamed attachment (the API's endpoint answers with it too)."""
    response = StreamingHttpResponse(
        evidence_export.export_lines(since=since, until=until, fmt=fmt, agent=agent),
        content_type=evidence_export.CONTENT_TYPES[fmt],
    )
    name = evidence_export.filename(since, until, fmt, agent)
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    response["Cache-Control"] = "no-store"
    return response
