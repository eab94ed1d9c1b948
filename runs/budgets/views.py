"""The Budgets page: every budget the user sees with its current period's spend; admins add,
change and remove any, a team's administrators their team's (runs/budgets/models.py has the
rules)."""

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from accounts.requests import SignedInRequest

from ..models import Budget
from . import models as budgets
from .forms import BudgetForm


def _require(allowed: bool) -> None:
    if not allowed:
        raise PermissionDenied


def _sets_budgets(user) -> bool:
    return user.is_admin or bool(budgets.administered_teams(user))


@require_http_methods(["GET", "POST"])
@login_required
def budget_list(request: SignedInRequest) -> HttpResponse:
    _require(request.user.can_view)
    may_add = _sets_budgets(request.user)
    form = BudgetForm(user=request.user) if may_add else None
    status = 200
    if request.method == "POST":
        _require(may_add)
        form = BudgetForm(request.POST, user=request.user)
        if form.is_valid():
            _save(form, request)
            return redirect("runs:budgets")
        status = 422
    states = budgets.states(viewer=request.user)
    editable = {s.budget.pk for s in states if budgets.may_edit(request.user, s.budget)}
    context = {"states": states, "form": form, "editable": editable}
    return render(request, "runs/budgets.html", context, status=status)


def _editable(request: HttpRequest, pk: int) -> Budget:
    budget = get_object_or_404(Budget.objects.select_related("team"), pk=pk)
    _require(budgets.may_edit(request.user, budget))
    return budget


@require_http_methods(["GET", "POST"])
@login_required
def budget_edit(request: HttpRequest, pk: int) -> HttpResponse:
    budget = _editable(request, pk)
    form = BudgetForm(request.POST or None, instance=budget, user=request.user)
    if request.method == "POST":
        if form.is_valid():
            _save(form, request)
            return redirect("runs:budgets")
        context = {"form": form, "budget": budget}
        return render(request, "runs/budget_edit.html", context, status=422)
    return render(request, "runs/budget_edit.html", {"form": form, "budget": budget})


@require_POST
@login_required
def budget_delete(request: HttpRequest, pk: int) -> HttpResponse:
    _editable(request, pk).delete()
    return redirect("runs:budgets")


def _save(form: BudgetForm, request: HttpRequest) -> Budget:
    budget = form.save(commit=False)
    budget.updated_by = request.user
    budget.updated_at = timezone.now()
    budget.save()
    return budget
