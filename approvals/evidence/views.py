"""The compliance export: a page linked from the audit area, whose form downloads the signed
file (approvals/evidence/export.py). Admins export every agent's decisions or one team's; a
team's administrators their teams' (approvals/oversight_reach.py). A download is a read: GET,
no CSRF needed."""

import logging
from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from accounts.requests import SignedInRequest
from agentkit.agents import CATALOGUE
from agentkit.streaming import streamed

from .. import oversight_reach
from . import export as evidence_export
from .export import ExportError

TEMPLATE = "approvals/decisions_export.html"
log = logging.getLogger("agentops.approvals")


@require_GET
@login_required
def decisions_export(request: SignedInRequest) -> HttpResponseBase:
    user = request.user
    if not oversight_reach.may_oversee(user):
        raise PermissionDenied
    query = request.GET
    today = timezone.now().date()
    form = {
        "since": query.get("since", (today - timedelta(days=30)).isoformat()),
        "until": query.get("until", today.isoformat()),
        "format": query.get("format", "csv"),
        "agent": query.get("agent", ""),
        "team": query.get("team", ""),
    }
    context = {
        "form": form,
        "agents": oversight_reach.agent_choices(user, sorted(CATALOGUE)),
        "teams": oversight_reach.team_slugs(user),
        "all_agents": user.is_admin,
        "error": "",
    }
    if "download" not in query:
        return render(request, TEMPLATE, context)
    try:
        since, until, fmt, agent = evidence_export.checked_request(
            form["since"], form["until"], form["format"], form["agent"]
        )
        agents = oversight_reach.agents_for(user, team=form["team"], agent=agent)
    except (ExportError, oversight_reach.OutOfReach) as exc:
        return render(request, TEMPLATE, {**context, "error": str(exc)}, status=400)
    team = form["team"].strip()
    return download(
        request, since=since, until=until, fmt=fmt, agent=agent, agents=agents, team=team
    )


def download(
    request, *, since, until, fmt: str, agent: str, agents: list[str] | None, team: str = ""
) -> StreamingHttpResponse:
    """The export as a streamed attachment (the API's endpoint answers with it too), of
    `agents` only (None: every agent; oversight_reach.agents_for says which)."""
    lines = evidence_export.export_lines(
        since=since, until=until, fmt=fmt, agent=agent, agents=agents, team=team
    )
    # Who took evidence out, and which: the log says it even when the file leaves no trace.
    log.info(
        "decisions export by %s: %s to %s, %s, agent %s, team %s, agents %s",
        request.user.get_username(),
        since.isoformat(),
        until.isoformat(),
        fmt,
        agent or "all",
        team or "any",
        "all" if agents is None else ",".join(agents) or "none",
    )
    response = StreamingHttpResponse(
        streamed(request, lines),
        content_type=evidence_export.CONTENT_TYPES[fmt],
    )
    name = evidence_export.filename(since, until, fmt, agent, team)
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    response["Cache-Control"] = "no-store"
    return response
