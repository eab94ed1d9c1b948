"""The Teams page (admins): which agents each team owns and what each member may do there
(accounts/teams.py says what that grants). The Django admin edits the same rows."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from accounts.requests import SignedInRequest

from . import teams
from .models import Team
from .team_forms import MemberFormSet, TeamForm, save_team


def _require_admin(request: SignedInRequest) -> None:
    if not request.user.is_admin:
        raise PermissionDenied


@require_GET
@login_required
def team_list(request: SignedInRequest) -> HttpResponse:
    _require_admin(request)
    rows = Team.objects.prefetch_related("agents", "members", "members__user")
    owned = {a for team in rows for a in team.agent_slugs}
    unowned = [a for a in teams.known_agents() if a not in owned]
    return render(request, "accounts/teams.html", {"teams": rows, "unowned": unowned})


@require_http_methods(["GET", "POST"])
@login_required
def team_edit(request: SignedInRequest, pk: int | None = None) -> HttpResponse:
    """A new team (no pk) or an existing one: its fields, agents and members on one form."""
    _require_admin(request)
    team = get_object_or_404(Team, pk=pk) if pk is not None else Team()
    form = TeamForm(request.POST or None, instance=team)
    members = MemberFormSet(request.POST or None, instance=team, prefix="members")
    if request.method == "POST":
        if form.is_valid() and members.is_valid():
            team = save_team(form, members)
            messages.success(request, f"Team {team.name} saved.")
            return redirect("teams:edit", pk=team.pk)
        status = 422
    else:
        status = 200
    context = {"form": form, "members": members, "team": team}
    return render(request, "accounts/team_edit.html", context, status=status)


@require_POST
@login_required
def team_delete(request: SignedInRequest, pk: int) -> HttpResponse:
    _require_admin(request)
    team = get_object_or_404(Team, pk=pk)
    team.delete()
    messages.success(
        request,
        f"Team {team.name} deleted; its agents without another team "
        "are reached through the global roles again.",
    )
    return redirect("teams:list")
