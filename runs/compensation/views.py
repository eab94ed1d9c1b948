"""The run page's compensation section (runs/compensation/models.py): a failed or cancelled run's
committed effects beside their compensations, and Compensate (one effect, or all). Function
views; an htmx request gets the #run-compensation fragment (a refusal with its 4xx status and
the reason in it), a plain form post a redirect to the run page."""

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from accounts.requests import HtmxRequest, SignedInRequest

from .. import rendering
from ..models import Run
from ..views import _get_run_for_user
from . import models as compensation


def _answer(request: HtmxRequest, run: Run, status: int = 200, **extra) -> HttpResponse:
    if not request.htmx:
        if status >= 400:
            return HttpResponse(
                extra.get("comp_error", ""), status=status, content_type="text/plain"
            )
        return redirect("runs:detail", pk=run.pk)
    run.refresh_from_db()
    context = rendering.compensation_context(run, request.user, **extra)
    return render(request, rendering.RUN_PAGE + "#run-compensation", context, status=status)


@require_GET
@login_required
def run_compensation(request: SignedInRequest, pk) -> HttpResponse:
    """The fragment alone: fetched by each viewer when a pushed step changes it."""
    run = _get_run_for_user(request, pk)
    context = rendering.compensation_context(run, request.user)
    return render(request, rendering.RUN_PAGE + "#run-compensation", context)


@require_POST
@login_required
def run_compensate(request: SignedInRequest, pk) -> HttpResponse:
    """Compensate one committed effect (`effect`: its id) or every one that may be (`all`)."""
    run = _get_run_for_user(request, pk, write=True)
    chosen = request.POST.get("effect", "").strip()
    if chosen == "all":
        effect_ids = None
    else:
        try:
            effect_ids = [int(chosen)]
        except ValueError:
            return _answer(request, run, 422, comp_error="choose an effect to compensate")
    try:
        made = compensation.request(run, effect_ids, by=request.user)
    except compensation.CompensationError as exc:
        return _answer(request, run, exc.status, comp_error=exc.message)
    message = (
        f"Compensation of {len(made)} effect(s) asked: it runs as its own run, gated like any call."
    )
    return _answer(request, run, comp_message=message)
