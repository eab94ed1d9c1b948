"""The Budgets page: every budget with its current period's spend; admins add, change and
remove them (runs/budgets.py has the rules)."""

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from . import budgets
from .budget_forms import BudgetForm
from .models import Budget


def _require(allowed: bool) -> None:
    if not allowed:
        raise PermissionDenied


@require_http_methods(["GET", "POST"])
@login_required
def budget_list(request: HttpRequest) -> HttpResponse:
    _require(request.user.can_view)
    form = BudgetForm()
    status = 200
    if request.method == "POST":
        _require(request.user.is_admin)
        form = BudgetForm(request.POST)
        if form.is_valid():
            _save(form, request)
            return redirect("runs:budgets")
        status = 422
    context = {"states": budgets.states(viewer=request.user), "form": form}
    return render(request, "runs/budgets.html", context, status=status)


@require_http_methods(["GET", "POST"])
@login_required
def budget_edit(request: HttpRequest, pk: int) -> HttpResponse:
    _require(request.user.is_admin)
    budget = get_object_or_404(Budget, pk=pk)
    form = BudgetForm(request.POST or None, instance=budget)
    if request.method == "POST":
        if form.is_valid():
            _save(form, request)
            return redirect("runs:budgets")
        return render(request, "runs/budget_edit.html", {"form": form, "budget": budget}, 422)
    return render(request, "runs/budget_edit.html", {"form": form, "budget": budget})


@require_POST
@login_required
def budget_delete(request: HttpRequest, pk: int) -> HttpResponse:
    _require(request.user.is_admin)
    get_object_or_404(Budget, pk=pk).delete()
    return redirect("runs:budgets")


def _save(form: BudgetForm, request: HttpRequest) -> Budget:
    budget = form.save(commit=False)
    budget.updated_by = request.user
    budget.updated_at = timezone.now()
    budget.save()
    return budget
