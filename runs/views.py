"""The control room's run pages: dashboard, runs list, launch form, run page, export, audit.

Function views; each page template defines its fragments with `{% partialdef %}` and an htmx
request gets the fragment whose name is the DOM id it targets. Every view is login- and
role-checked; runs are fetched through `_get_run_for_user` only.
"""

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, time, timedelta

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Count, Exists, OuterRef, Q, Sum, TextField
from django.db.models.functions import Cast, TruncHour
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.templatetags.static import static
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from accounts.requests import HtmxRequest, SignedInRequest
from agentkit import pii, storable
from agentkit.agents import Agent
from agentkit.database import in_batches
from agentkit.streaming import streamed

from . import charts, costs, drift, engine, paging, rendering
from .budgets import models as budgets
from .forms import LIMIT_FIELDS, LaunchForm, RunFilterForm, launchable_agents
from .models import SEARCH_SORTS_AT_MOST, ArchivedRun, Checkpoint, PendingOperation, Run, Step
from .pending import models as pending
from .schemas import RunExportOut, StepOut, with_pending_count

RUNS_PER_PAGE = 50


def _require(request: HttpRequest, allowed: bool) -> None:
    if not allowed:
        raise PermissionDenied


def _get_run_for_user(request: SignedInRequest, pk, write: bool = False) -> Run:
    """The one place that says who may see (and, with write=True, operate) a run."""
    user = request.user
    _require(request, user.can_view and (not write or user.can_operate))
    run = get_object_or_404(Run.objects.visible_to(user).select_related("launched_by"), pk=pk)
    # Seen but not operated: the teams that own its agent let this user view only.
    _require(request, not write or Run.objects.operable_by(user).filter(pk=run.pk).exists())
    return run


def _partial(request: HtmxRequest, template: str, allowed: set[str]) -> str:
    """`template#<target>` for an htmx request aimed at one of the page's fragments."""
    target = request.htmx.target if request.htmx else None
    return f"{template}#{target}" if target in allowed else template


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    # Browsers ask for /favicon.ico whatever the page says; resolved per request, because the
    # static manifest does not exist before collectstatic.
    return redirect(static("favicon.svg"), permanent=True)


# --- dashboard ---------------------------------------------------------------------------------
@require_GET
@login_required
def dashboard(request: SignedInRequest) -> HttpResponse:
    _require(request, request.user.can_view)
    template = _partial(
        request,
        rendering.DASHBOARD,
        {
            "dashboard-stats",
            "inflight",
            "dashboard-approvals",
            "dashboard-costs",
            "dashboard-budgets",
            "dashboard-drift",
        },
    )
    # An htmx request (the stats refresh every 15 s) reads only what its fragment shows.
    fragment = template.partition("#")[2]
    context = {}
    if fragment in ("", "inflight"):
        inflight = Run.objects.visible_to(request.user).active().for_lists()[:50]
        context["inflight"] = [rendering.run_context(r) for r in inflight]
    if fragment in ("", "dashboard-stats"):
        context.update(_dashboard_stats(Run.objects.visible_to(request.user), timezone.now()))
    if fragment in ("", "dashboard-costs"):
        context["costs"] = costs.cost_by_agent(viewer=request.user)
    if fragment in ("", "dashboard-budgets"):
        context["budget_states"] = budgets.states(viewer=request.user)
    if fragment in ("", "dashboard-drift"):
        context["drifts"] = drift.flags(Run.objects.visible_to(request.user))
        context["drift_runs"] = drift.window_size()
    return render(request, template, context)


def _dashboard_stats(runs, now: datetime) -> dict:
    """Runs by status, the charts and the recent failures. Runs in flight are counted
    whenever they were created; finished ones over the charts' 24 hours, so that no query
    reads every run ever made."""
    since = (now - timedelta(hours=23)).replace(minute=0, second=0, microsecond=0)
    in_flight = dict.fromkeys(Run.ACTIVE_STATUSES, 0)
    # COUNT(*), not of the id: Postgres counts from the status index alone.
    for row in runs.active().values("status").annotate(n=Count("*")).order_by():
        in_flight[row["status"]] = row["n"]
    finished = dict.fromkeys(Run.TERMINAL_STATUSES, 0)
    runs_by_hour: dict[datetime, int] = {}
    cost_by_hour: dict[datetime, float] = {}
    rows = (
        runs.filter(created_at__gte=since)
        .annotate(hour=TruncHour("created_at"))
        .values("hour", "status")
        .annotate(runs=Count("*"), cost=Sum("cost_usd"))
        .order_by()
    )
    for row in rows:
        if row["status"] in finished:
            finished[row["status"]] += row["runs"]
        hour = row["hour"]
        runs_by_hour[hour] = runs_by_hour.get(hour, 0) + row["runs"]
        cost_by_hour[hour] = cost_by_hour.get(hour, 0.0) + float(row["cost"] or 0)
    hours = [since + timedelta(hours=i) for i in range(24)]
    failures = runs.filter(status=Run.Status.FAILED).for_lists()
    return {
        "in_flight_counts": in_flight,
        "finished_counts": finished,
        "failures": list(failures.order_by("-finished_at", "-created_at")[:10]),
        "charts": {
            "runs": charts.bars(
                [(f"{h:%H}:00", runs_by_hour.get(h, 0)) for h in hours],
                unit="runs",
                title="Runs per hour, 24 h",
            ),
            "cost": charts.bars(
                [(f"{h:%H}:00", cost_by_hour.get(h, 0.0)) for h in hours],
                unit="USD",
                title="Cost per hour, 24 h",
            ),
        },
    }


# --- runs list ------------------------------------------------------------------------------
def filtered_runs(request: HttpRequest, form: RunFilterForm):
    runs = Run.objects.visible_to(request.user).for_lists()
    if not form.is_valid():
        return runs.none()
    f = form.cleaned_data
    if f["status"]:
        runs = runs.filter(status=f["status"])
    if f["agent"]:
        runs = runs.filter(agent=f["agent"])
    if f["trigger"]:
        runs = runs.filter(trigger=f["trigger"])
    if f["launched_by"]:
        runs = runs.filter(launched_by__username=f["launched_by"])
    tz = timezone.get_current_timezone()
    if f["date_from"]:
        runs = runs.filter(created_at__gte=datetime.combine(f["date_from"], time.min, tz))
    if f["date_to"]:
        runs = runs.filter(
            created_at__lt=datetime.combine(f["date_to"] + timedelta(days=1), time.min, tz)
        )
    if f["outcome"]:
        # The run's own counters: no join, whatever the page size.
        runs = runs.filter(**{f"{f['outcome']}_count__gt": 0})
    if f["decided_by"]:
        # Through the reverse relation (approvals stand above runs); Exists keeps one row
        # per run however many approvals that person decided in it.
        decided = Run.approvals.rel.related_model.objects.filter(
            run=OuterRef("pk"), decided_by__username=f["decided_by"]
        )
        runs = runs.filter(Exists(decided))
    if f["q"]:
        runs = runs.search(f["q"])
    return runs


@dataclass(frozen=True)
class Counted:
    """How many runs the filters match, counted up to `cap`: past that, an exact number
    costs more than it tells (the COUNT(*) for a common word among 100 000 runs took
    150 ms), so the pager says "5000+"; narrower filters reach the rest sooner."""

    seen: int  # at most cap + 1 (one more than cap says there are more)
    cap: int

    @property
    def count(self) -> int:
        return min(self.seen, self.cap)

    @property
    def more(self) -> bool:
        return self.seen > self.cap


def _filtered_page(request: HttpRequest) -> tuple[RunFilterForm, paging.Page, Counted, str]:
    """The runs list and the audit search share filters and paging: the form, the page of
    runs (keyset: runs/paging.py), how many match, and the query string without the page's
    cursor for the pager's links."""
    form = RunFilterForm(request.GET)
    runs = filtered_runs(request, form)
    cap = SEARCH_SORTS_AT_MOST
    counted = Counted(seen=runs.order_by()[: cap + 1].count(), cap=cap)
    if form.is_valid() and form.cleaned_data["q"]:
        # Counted first: how many matched decides how the page is best read.
        runs = runs.newest_first_for_search(counted.seen)
    else:
        runs = runs.order_by("-created_at", "-id")
    page = paging.page(
        runs, after=request.GET.get("after"), before=request.GET.get("before"), size=RUNS_PER_PAGE
    )
    query = request.GET.copy()
    for name in ("page", "after", "before"):
        query.pop(name, None)
    return form, page, counted, query.urlencode()


@require_GET
@login_required
def run_list(request: SignedInRequest) -> HttpResponse:
    _require(request, request.user.can_view)
    form, page, counted, query = _filtered_page(request)
    filtered = form.is_valid() and any(form.cleaned_data.values())
    context = {
        "form": form,
        "page": page,
        "counted": counted,
        "query": query,
        # New runs are pushed into the table only where they belong: the unfiltered first page.
        "live_insert": page.is_first and not filtered,
    }
    template = _partial(request, rendering.RUN_LIST, {"run-table"})
    agent = form.cleaned_data.get("agent") if form.is_valid() else ""
    if agent and "#" not in template:
        # One agent's runs: the page says whether they drifted (runs/drift.py).
        context["drifts"] = drift.flags(Run.objects.visible_to(request.user).filter(agent=agent))
        context["drift_runs"] = drift.window_size()
    return render(request, template, context)


# --- launch -----------------------------------------------------------------------------------
@require_http_methods(["GET", "POST"])
@login_required
def run_new(request: SignedInRequest) -> HttpResponse:
    _require(request, request.user.can_operate)
    if request.method == "POST":
        form = LaunchForm(request.POST, user=request.user)
        agent = launchable_agents(request.user).get(request.POST.get("agent", ""))
        input_form = agent.input_form(request.POST) if agent else None
        if form.is_valid() and agent and input_form.is_valid():
            limits, limit_errors = agent.resolve_limits(form.limit_overrides())
            for name, messages in limit_errors.items():
                for message in messages:
                    form.add_error(f"limit_{name}", message)
            # The API's validation, so a form launch stores exactly what an API launch would.
            data, input_errors = agent.validate_input(
                {k: v for k, v in request.POST.items() if k in agent.input_form.base_fields}
            )
            for name, messages in input_errors.items():
                for message in messages:
                    input_form.add_error(None if name == "__all__" else name, message)
            refusal = budgets.launch_refusal(agent.slug)
            if refusal:
                form.add_error("agent", refusal)
            elif limits is not None and data is not None:
                run = engine.launch(
                    agent=agent,
                    input=data,
                    limits=limits,
                    trigger=Run.Trigger.FORM,
                    launched_by=request.user,
                    source="launch form",
                )
                return redirect("runs:detail", pk=run.pk)
        return render(
            request, "runs/run_new.html", _launch_context(form, agent, input_form), status=422
        )
    launchable = launchable_agents(request.user)
    agent = launchable.get(request.GET.get("agent", "")) or next(iter(launchable.values()), None)
    form = LaunchForm(initial={"agent": agent.slug if agent else ""}, user=request.user)
    context = _launch_context(form, agent, agent.input_form() if agent else None)
    template = _partial(request, "runs/run_new.html", {"launch-form-fields"})
    return render(request, template, context)


def _launch_context(form: LaunchForm, agent: Agent | None, input_form) -> dict:
    return {
        "form": form,
        "agent": agent,
        "input_form": input_form,
        "limit_fields": [form[f"limit_{name}"] for name in LIMIT_FIELDS],
    }


# --- the run page -----------------------------------------------------------------------------
@require_GET
@login_required
def run_detail(request: SignedInRequest, pk) -> HttpResponse:
    run = _get_run_for_user(request, pk)
    kind = request.GET.get("kind", "")
    kind = kind if kind in rendering.FILTERS else ""
    q = request.GET.get("q", "").strip()[:200]
    filtered = bool(kind or q)
    if filtered:
        # Every matching step of the run (up to a bound), oldest first; not live.
        found = list(_matching_steps(run, kind, q).order_by("seq")[: MAX_MATCHES + 1])
        steps, more_matches = found[:MAX_MATCHES], len(found) > MAX_MATCHES
    else:
        # Up to the step the header was read with: a step committed since (the run paused,
        # say) would show beside a header that predates it, and the socket, resuming after
        # that step, would never send the header that goes with it.
        shown = run.steps.filter(seq__lte=run.last_seq).order_by("-seq")
        steps = list(shown[: rendering.TIMELINE_PAGE])[::-1]
        more_matches = False
    context = {
        **rendering.run_context(run),
        "steps": [rendering.step_view(s) for s in steps],
        "filters": rendering.FILTERS,
        "kind": kind,
        "q": q,
        "filtered": filtered,
        "more_matches": more_matches,
        "first_seq": steps[0].seq if steps and not filtered else 0,
        # An empty timeline of a run that has steps: they may live in an archive.
        "archived": ArchivedRun.objects.filter(run=run).first()
        if not steps and not filtered and run.last_seq
        else None,
        # The WebSocket resumes after the newest step this page shows: whatever commits from
        # then on comes over the socket, with the header as of that step.
        "last_seq": steps[-1].seq if steps else 0,
        "checkpoints": run.checkpoints.order_by("-seq").values("seq", "created_at")[:50],
        # The runs this one came from and led to (chained, forked, replayed).
        "parent": Run.objects.visible_to(request.user)
        .filter(pk=run.parent_id)
        .only("agent", "status")
        .first()
        if run.parent_id
        else None,
        # The checkpoint's seq only: its state can be large.
        "forked_at": Checkpoint.objects.filter(pk=run.forked_from_id)
        .values_list("seq", flat=True)
        .first()
        if run.forked_from_id
        else None,
        "children": list(
            run.children.visible_to(request.user)
            .only("agent", "status", "trigger")
            .order_by("created_at")[:50]
        ),
        # What the run declared it would launch on success (chained runs).
        "follow_ups": run.agent_config.get("follow_ups") or [],
        **_operations(run),
        **rendering.steer_context(run),
        **rendering.compensation_context(run, request.user),
    }
    return render(request, _partial(request, rendering.RUN_PAGE, {"run-header"}), context)


MAX_MATCHES = 500
# The timeline filter's kinds of step; "error" is any step shown as an error.
_FILTER_KINDS = {
    "model": Q(kind__in=[Step.Kind.LLM, Step.Kind.LLM_ERROR]),
    "tool": Q(kind=Step.Kind.TOOL),
    "gate": Q(kind=Step.Kind.GATE),
    "decision": Q(kind=Step.Kind.DECISION),
    "operator": Q(kind=Step.Kind.OPERATOR),
    "summary": Q(kind=Step.Kind.SUMMARY),
    "guard": Q(kind=Step.Kind.GUARD),
    "error": Q(kind=Step.Kind.LLM_ERROR)
    | Q(kind=Step.Kind.TOOL, data__is_error=True)
    | Q(kind=Step.Kind.SUMMARY, data__failed=True)
    | Q(kind=Step.Kind.DECISION, data__decision="expire")
    | Q(kind=Step.Kind.STATUS, data__to=Run.Status.FAILED)
    | Q(kind=Step.Kind.STATUS, data__event="error"),
}


def _matching_steps(run: Run, kind: str, q: str):
    """The run's steps of a filter's kind whose recorded data contains `q` (any case): one
    run's steps, read once (the timeline is per run, so no index is needed)."""
    steps = run.steps.all()
    if kind:
        steps = steps.filter(_FILTER_KINDS[kind])
    if q:
        steps = steps.annotate(text=Cast("data", TextField())).filter(text__icontains=q)
    return steps


def _operations(run: Run) -> dict:
    operations = list(run.pending_operations.all()[:50])
    return {
        "operations": operations,
        "has_open_operations": any(op.is_open for op in operations) and not run.is_terminal,
    }


@require_GET
@login_required
def run_pending(request: SignedInRequest, pk) -> HttpResponse:
    """The run page's pending operations (refreshed while some are open)."""
    run = _get_run_for_user(request, pk)
    context = {"run": run, **_operations(run)}
    return render(request, rendering.RUN_PAGE + "#pending-ops", context)


@require_GET
@login_required
def run_actions(request: SignedInRequest, pk) -> HttpResponse:
    """The run page's controls as this viewer may use them: fetched by each viewer when a
    reopened run offers Cancel again (the push that ended it sent them without)."""
    run = _get_run_for_user(request, pk)
    return render(request, rendering.RUN_PAGE + "#run-actions", {"run": run})


@require_POST
@login_required
def run_pending_finish(request: SignedInRequest, pk, op_id: int) -> HttpResponse:
    """An operator marks an operation done (its result: JSON, else the text) or failed."""
    run = _get_run_for_user(request, pk, write=True)
    op = get_object_or_404(run.pending_operations, pk=op_id)
    text = request.POST.get("result", "").strip()[:10000]
    by = f"operator {request.user.get_username()}"
    error, status = "", 200
    try:
        if request.POST.get("action") == "fail":
            pending.finish(op.pk, PendingOperation.Status.FAILED, error=text or "failed", by=by)
        elif request.POST.get("action") == "complete":
            pending.finish(
                op.pk, PendingOperation.Status.COMPLETED, result=_json_or_text(text), by=by
            )
        else:
            error, status = "choose Mark done or Mark failed", 400
    except pending.AlreadyFinished as exc:
        error, status = str(exc), 409
    if not request.htmx:
        if error:
            return HttpResponse(error, status=status, content_type="text/plain")
        return redirect("runs:detail", pk=run.pk)
    run.refresh_from_db()
    context = {"run": run, "pending_error": error, **_operations(run)}
    return render(request, rendering.RUN_PAGE + "#pending-ops", context, status=status)


def _json_or_text(text: str):
    try:
        return storable.loads(text)
    except ValueError:  # not JSON, or JSON that cannot be stored: the text as it came
        return text


@require_GET
@login_required
def run_steps(request: SignedInRequest, pk) -> HttpResponse:
    """Older steps, loaded on demand above the ones the page shows."""
    run = _get_run_for_user(request, pk)
    try:
        before = int(request.GET.get("before", ""))
    except ValueError:
        return HttpResponse("before must be a step number", status=400)
    steps = list(run.steps.filter(seq__lt=before).order_by("-seq")[: rendering.TIMELINE_PAGE])[::-1]
    context = {
        "run": run,
        "steps": [rendering.step_view(s) for s in steps],
        "first_seq": steps[0].seq if steps else 0,
    }
    return render(request, rendering.RUN_PAGE + "#older-steps", context)


@require_GET
@login_required
def run_step(request: SignedInRequest, pk, seq: int) -> HttpResponse:
    """One step with its full (untruncated) content."""
    run = _get_run_for_user(request, pk)
    step = get_object_or_404(Step, run=run, seq=seq)
    return render(
        request, "runs/run_step.html", {"run": run, "v": rendering.step_view(step, full=True)}
    )


@require_POST
@login_required
def run_cancel(request: SignedInRequest, pk) -> HttpResponse:
    run = _get_run_for_user(request, pk, write=True)
    run.cancel(by=request.user, reason=f"cancelled by {request.user.get_username()}")
    if request.htmx:
        return render(request, rendering.RUN_PAGE + "#run-header", rendering.run_context(run))
    return redirect("runs:detail", pk=run.pk)


# --- export -----------------------------------------------------------------------------------
def _run_record(run: Run) -> dict:
    return RunExportOut.from_orm(with_pending_count(run)).model_dump()


def _step_record(step: Step) -> dict:
    return StepOut.from_orm(step).model_dump()


class _ExactEncoder(DjangoJSONEncoder):
    """The API's encoder (ninja's is DjangoJSONEncoder too), but times to the microsecond:
    a step's hash covers its exact created_at, which DjangoJSONEncoder cuts to milliseconds,
    so an export's chain could not be checked (or imported) elsewhere."""

    def default(self, o):
        if isinstance(o, datetime):
            return o.isoformat()
        return super().default(o)


def _dumps(value) -> str:
    return json.dumps(value, cls=_ExactEncoder, ensure_ascii=False)


@require_GET
@login_required
def run_export(request: SignedInRequest, pk, fmt: str) -> StreamingHttpResponse:
    """The timeline as JSON (run, steps, checkpoints) or JSONL (one run line, one line per
    step, then one `{"checkpoint": ...}` line per checkpoint), streamed so a long run never
    sits in memory whole. `manage.py import_run` reads either on another installation."""
    if fmt not in ("json", "jsonl"):
        raise Http404("export is json or jsonl")
    run = _get_run_for_user(request, pk)
    steps = in_batches(run.steps.all(), by=("seq",))
    # Under a PII policy the export holds what the timeline holds: masked. The steps are
    # stored masked (their chain verifies as exported); the run's input and output and the
    # checkpoints' conversations (kept raw for the run to continue) are masked here.
    masked = pii.masker((run.agent_config or {}).get("pii"))
    checkpoints = (
        {**c, "state": masked(c["state"])}
        for c in in_batches(run.checkpoints.values("seq", "state", "created_at"), by=("seq",))
    )
    record = masked(_run_record(run))

    def jsonl() -> Iterator[str]:
        yield _dumps({"run": record}) + "\n"
        for step in steps:
            yield _dumps(_step_record(step)) + "\n"
        for checkpoint in checkpoints:
            yield _dumps({"checkpoint": checkpoint}) + "\n"

    def whole() -> Iterator[str]:
        yield '{"run": ' + _dumps(record) + ', "steps": ['
        for i, step in enumerate(steps):
            yield ("," if i else "") + _dumps(_step_record(step))
        yield '], "checkpoints": ['
        for i, checkpoint in enumerate(checkpoints):
            yield ("," if i else "") + _dumps(checkpoint)
        yield "]}\n"

    chunks = jsonl() if fmt == "jsonl" else whole()
    response = StreamingHttpResponse(
        streamed(request, chunks),
        content_type="application/jsonl" if fmt == "jsonl" else "application/json",
    )
    response["Content-Disposition"] = f'attachment; filename="run-{run.pk}.{fmt}"'
    return response


# --- audit ------------------------------------------------------------------------------------
@require_GET
@login_required
def audit(request: SignedInRequest) -> HttpResponse:
    _require(request, request.user.can_view)
    form, page, counted, query = _filtered_page(request)
    context = {"form": form, "page": page, "counted": counted, "query": query}
    return render(request, "runs/audit.html", context)


@require_GET
@login_required
def audit_run(request: SignedInRequest, pk) -> HttpResponse:
    """A past run's whole timeline with its hash chain verified."""
    run = _get_run_for_user(request, pk)
    # An archived run's timeline is in its archive file (manage.py archive --verify checks
    # its chain there); here the page says so instead of a chain that verifies nothing.
    steps = list(run.steps.order_by("seq")[:2000])
    archived = ArchivedRun.objects.filter(run=run).first() if not steps else None
    ok, bad_seq = (True, None) if archived else run.verify_chain()
    context = {
        "archived": archived,
        **rendering.run_context(run),
        "steps": [rendering.step_view(s) for s in steps],
        "more": run.last_seq > len(steps),
        "chain_ok": ok,
        "bad_seq": bad_seq,
        # Each committed effect beside its compensation, read-only.
        **rendering.compensation_context(run, request.user, actions=False),
    }
    return render(request, "runs/audit_run.html", context)
