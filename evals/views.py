"""The regression pages: datasets, a dataset's cases and regression runs, a regression run's
results, two runs compared. Reading needs the view power on the dataset's agent; building a
dataset and running it, the launch power (accounts/teams.py); every form carries CSRF."""

from uuid import UUID

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from accounts import teams
from agentkit import llm

from . import cases, tasks
from .comparison import NotComparable, compare
from .forms import AddApprovalForm, DatasetForm, DecisionFilterForm, RegressionForm
from .models import Dataset, RegressionRun
from .rehearsal import RegressionError, prepare

BULK_LIMIT = 500  # decisions one bulk add takes


def _dataset(request: HttpRequest, pk: int, *, write: bool = False) -> Dataset:
    # The role first (403), then the team (404: another team's dataset is not there).
    if not request.user.can_view or (write and not request.user.can_operate):
        raise PermissionDenied
    dataset = get_object_or_404(Dataset.objects.reachable_by(request.user, teams.Power.VIEW), pk=pk)
    if write and not teams.may(request.user, teams.Power.LAUNCH, dataset.agent):
        raise PermissionDenied
    return dataset


@require_http_methods(["GET", "POST"])
@login_required
def datasets(request: HttpRequest) -> HttpResponse:
    """The datasets the user may see; POST (operators): a new one."""
    if not request.user.can_view:
        raise PermissionDenied
    form = None
    if request.user.can_operate:
        form = DatasetForm(request.POST if request.method == "POST" else None, user=request.user)
        if request.method == "POST" and form.is_valid():
            dataset = form.save(commit=False)
            dataset.created_by = request.user
            dataset.save()
            return redirect("evals:dataset", pk=dataset.pk)
    elif request.method == "POST":
        raise PermissionDenied
    rows = Dataset.objects.reachable_by(request.user, teams.Power.VIEW).order_by("name")
    context = {"datasets": rows, "form": form, **_from_run(request)}
    status = 422 if form is not None and form.errors else 200
    return render(request, "evals/datasets.html", context, status=status)


def _from_run(request: HttpRequest) -> dict:
    """?run=<id> (the run page's "add decisions to a dataset"): that run's decisions, and the
    datasets of its agent they can go to."""
    try:
        run_id = UUID(request.GET.get("run", ""))
    except ValueError:
        return {}
    decided = list(cases.decisions_reaching(request.user).filter(run_id=run_id))
    failed = list(
        cases.verifier_failures_reaching(request.user).filter(run_id=run_id).order_by("seq")
    )
    if not (decided or failed):
        return {"from_run": run_id, "run_decisions": [], "run_failures": []}
    agent = (decided or failed)[0].run.agent
    targets = Dataset.objects.reachable_by(request.user, teams.Power.LAUNCH).filter(agent=agent)
    return {
        "from_run": run_id,
        "run_agent": agent,
        "run_decisions": decided,
        "run_failures": failed,
        "run_targets": targets,
    }


def _dataset_page(request, dataset, *, status=200, **context) -> HttpResponse:
    may_build = teams.may(request.user, teams.Power.LAUNCH, dataset.agent)
    context.setdefault("filter_form", DecisionFilterForm())
    context.setdefault(
        "regression_form",
        RegressionForm(user=request.user, dataset=dataset, provider=llm.default_provider_name()),
    )
    context.update(
        dataset=dataset,
        cases=dataset.cases.select_related("source_run"),
        regression_runs=dataset.regression_runs.all()[:50],
        may_build=may_build,
    )
    return render(request, "evals/dataset.html", context, status=status)


@require_GET
@login_required
def dataset(request: HttpRequest, pk: int) -> HttpResponse:
    return _dataset_page(request, _dataset(request, pk))


@require_POST
@login_required
def add_decisions(request: HttpRequest, pk: int) -> HttpResponse:
    """The bulk add: every decision of the dataset's agent the filter selects."""
    dataset = _dataset(request, pk, write=True)
    form = DecisionFilterForm(request.POST)
    if not form.is_valid():
        return _dataset_page(request, dataset, status=422, filter_form=form)
    chosen = form.decision_filter()
    approvals = cases.decisions_reaching(request.user).filter(run__agent=dataset.agent)
    selected = chosen.apply(approvals)
    failures = cases.verifier_failures_reaching(request.user).filter(run__agent=dataset.agent)
    failed = chosen.failures(failures)[: max(0, BULK_LIMIT - len(selected))]
    added, skipped = cases.add(dataset, selected[:BULK_LIMIT], by=request.user)
    added_failures, skipped_failures = cases.add_failures(dataset, failed, by=request.user)
    added, skipped = added + added_failures, skipped + skipped_failures
    notice = f"{len(added)} case(s) added from {len(selected)} decision(s)"
    if failed:
        notice += f" and {len(failed)} verifier failure(s)"
    if len(selected) > BULK_LIMIT:
        notice += f"; only the first {BULK_LIMIT} were taken: narrow the filter"
    return _dataset_page(request, dataset, filter_form=form, notice=notice, skipped=skipped)


@require_POST
@login_required
def add_approval(request: HttpRequest, approval: str) -> HttpResponse:
    """The approval card's "add to dataset": this decided call, into a chosen dataset."""
    if not (request.user.can_view and request.user.can_operate):
        raise PermissionDenied
    decided = get_object_or_404(cases.decisions_reaching(request.user), pk=approval)
    datasets = Dataset.objects.reachable_by(request.user, teams.Power.LAUNCH).filter(
        agent=decided.run.agent
    )
    form = AddApprovalForm(request.POST, datasets=datasets)
    if not form.is_valid():
        return HttpResponse("Choose one of the agent's datasets.", status=422)
    dataset = form.cleaned_data["dataset"]
    _, skipped = cases.add(dataset, [decided], by=request.user)
    if skipped:
        return _dataset_page(request, dataset, status=409, skipped=skipped)
    return redirect("evals:dataset", pk=dataset.pk)


@require_POST
@login_required
def remove_case(request: HttpRequest, pk: int, case: int) -> HttpResponse:
    dataset = _dataset(request, pk, write=True)
    get_object_or_404(dataset.cases, pk=case).delete()
    return redirect("evals:dataset", pk=dataset.pk)


@require_POST
@login_required
def run_regression(request: HttpRequest, pk: int) -> HttpResponse:
    """Start a regression run of the dataset (a task replays it) and show its page, which
    follows it until it is finished."""
    dataset = _dataset(request, pk, write=True)
    form = RegressionForm(request.POST, user=request.user, dataset=dataset, provider="")
    if not form.is_valid():
        return _dataset_page(request, dataset, status=422, regression_form=form)
    agent = form.cleaned_data["agent"]
    if not teams.may(request.user, teams.Power.LAUNCH, agent):
        raise PermissionDenied  # the agent replayed, too, must be the user's to launch
    try:
        regression = prepare(
            dataset, agent, provider=form.cleaned_data["provider"], by=request.user
        )
    except RegressionError as exc:
        form.add_error(None, str(exc))
        return _dataset_page(request, dataset, status=422, regression_form=form)
    transaction.on_commit(lambda: tasks.run_regression.delay(regression.pk))
    return redirect("evals:regression_run", pk=regression.pk)


def _regression_run(request: HttpRequest, pk: int) -> RegressionRun:
    if not request.user.can_view:
        raise PermissionDenied
    regression = get_object_or_404(RegressionRun.objects.select_related("dataset"), pk=pk)
    # Its dataset's agent and the agent replayed: both must be the user's to see.
    scope = teams.scope(request.user, teams.Power.VIEW)
    if not (scope.allows(regression.dataset.agent) and scope.allows(regression.agent)):
        raise PermissionDenied
    return regression


@require_GET
@login_required
def regression_run(request: HttpRequest, pk: int) -> HttpResponse:
    regression = _regression_run(request, pk)
    others = regression.dataset.regression_runs.exclude(pk=regression.pk)[:20]
    context = {
        "regression": regression,
        "results": regression.results.select_related("case"),
        "others": others,
    }
    return render(request, "evals/regression_run.html", context)


@require_GET
@login_required
def compare_runs(request: HttpRequest, pk: int) -> HttpResponse:
    """This regression run (after) beside another of the same dataset (?before=)."""
    after = _regression_run(request, pk)
    try:
        before_pk = int(request.GET.get("before", ""))
    except ValueError:
        return HttpResponse("Say which regression run to compare with (?before=id).", status=400)
    before = _regression_run(request, before_pk)
    try:
        rows = compare(before, after)
    except NotComparable as exc:
        return HttpResponse(str(exc), status=400)
    context = {"before": before, "after": after, "rows": rows}
    return render(request, "evals/compare.html", context)
