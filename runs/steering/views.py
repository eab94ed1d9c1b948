"""The run page's steering section: pause and resume, an instruction for the agent, and the
choice for a failed step (runs/steering/models.py does each). Function views; each answers an htmx
request with the #run-steer fragment (a refusal with its 4xx status and the reason in it),
and a plain form post with a redirect to the run page."""

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from accounts.requests import HtmxRequest, SignedInRequest

from .. import rendering
from ..forms import InstructionForm, RecoveryForm
from ..models import Run
from ..views import _get_run_for_user
from . import models as steering


def _answer(request: HtmxRequest, run: Run, status: int = 200, **extra) -> HttpResponse:
    if not request.htmx:
        if status >= 400:
            return HttpResponse(
                extra.get("steer_error", ""), status=status, content_type="text/plain"
            )
        return redirect("runs:detail", pk=run.pk)
    run.refresh_from_db()
    return render(
        request,
        rendering.RUN_PAGE + "#run-steer",
        rendering.steer_context(run, **extra),
        status=status,
    )


@require_GET
@login_required
def run_steer(request: SignedInRequest, pk) -> HttpResponse:
    """The fragment alone: fetched by each viewer when a pushed step changes it."""
    run = _get_run_for_user(request, pk)
    return render(request, rendering.RUN_PAGE + "#run-steer", rendering.steer_context(run))


@require_POST
@login_required
def run_pause(request: SignedInRequest, pk) -> HttpResponse:
    run = _get_run_for_user(request, pk, write=True)
    try:
        asked = steering.request_pause(run, by=request.user)
    except steering.SteerError as exc:
        return _answer(request, run, exc.status, steer_error=str(exc))
    message = (
        "Pause asked: the run pauses at its next step." if asked else "A pause was asked already."
    )
    return _answer(request, run, steer_message=message)


@require_POST
@login_required
def run_resume(request: SignedInRequest, pk) -> HttpResponse:
    run = _get_run_for_user(request, pk, write=True)
    try:
        outcome = steering.resume(run, by=request.user)
    except steering.SteerError as exc:
        return _answer(request, run, exc.status, steer_error=str(exc))
    message = "Resumed." if outcome == "resumed" else "Pause withdrawn before it was taken."
    return _answer(request, run, steer_message=message)


@require_POST
@login_required
def run_instruct(request: SignedInRequest, pk) -> HttpResponse:
    run = _get_run_for_user(request, pk, write=True)
    form = InstructionForm(request.POST)
    if not form.is_valid():
        return _answer(request, run, 422, steer_error=_first_error(form))
    try:
        _, new = steering.instruct(
            run, text=form.cleaned_data["text"], key=form.cleaned_data["key"], by=request.user
        )
    except steering.SteerError as exc:
        return _answer(request, run, exc.status, steer_error=str(exc))
    message = "Sent: the agent gets it at its next model turn." if new else "Sent already."
    return _answer(request, run, steer_message=message)


@require_POST
@login_required
def run_recover(request: SignedInRequest, pk) -> HttpResponse:
    run = _get_run_for_user(request, pk, write=True)
    form = RecoveryForm(request.POST)
    if not form.is_valid():
        return _answer(request, run, 422, steer_error=_first_error(form))
    data = form.cleaned_data
    choice = steering.Choice(
        data["choice"], args=data.get("arguments"), note=data["note"], text=data["text"]
    )
    try:
        steering.choose(run, choice, by=request.user)
    except steering.SteerError as exc:
        return _answer(request, run, exc.status, steer_error=str(exc))
    return _answer(
        request, run, steer_message=f"{data['choice'].capitalize()} chosen; the run goes on."
    )


def _first_error(form) -> str:
    for field, errors in form.errors.items():
        label = "" if field == "__all__" else f"{field}: "
        return f"{label}{errors[0]}"
    return "invalid request"


@require_POST
@login_required
def run_reopen(request: SignedInRequest, pk) -> HttpResponse:
    """ "Resume from here": a failed run reopened with the operator's choice."""
    run = _get_run_for_user(request, pk, write=True)
    form = RecoveryForm(request.POST)
    if not form.is_valid():
        return _answer(request, run, 422, steer_error=_first_error(form))
    data = form.cleaned_data
    choice = steering.Choice(
        data["choice"], args=data.get("arguments"), note=data["note"], text=data["text"]
    )
    try:
        steering.reopen(run, choice, by=request.user)
    except steering.SteerError as exc:
        return _answer(request, run, exc.status, steer_error=str(exc))
    return _answer(request, run, steer_message=f"Reopened ({data['choice']}); the run goes on.")
