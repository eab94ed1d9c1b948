"""Prometheus endpoints: the event counters of every process that shares this process's
PROMETHEUS_MULTIPROC_DIR (agentkit/metrics.py: a host, or a pod), and the state read at
scrape time (runs in flight by status, approvals pending and the oldest one's age, the
queue's depth), which is the same whichever process answers.
Why and how: docs/design/modules.md."""

import hmac
import logging
import time
from collections.abc import Iterable, Iterator

from django.conf import settings
from django.db.models import Count, Min
from django.http import Http404, HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector

from agentkit import agents
from approvals.models import Approval
from runs import queue
from runs.models import Run

log = logging.getLogger("agentops.monitoring")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class StateCollector:
    """What is true now, read from the database and the broker on each scrape: a few small
    aggregate queries, the same answer whichever process serves the scrape. A source that
    does not answer leaves its series out and says so in agentops_metrics_source_up."""

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "agentops_metrics_source_up",
            "Whether the source of the state metrics answered this scrape",
            labels=["source"],
        )
        try:
            yield from self._database()
            up.add_metric(["database"], 1)
        except Exception as exc:
            log.warning("metrics: database unreachable (%s)", exc)
            up.add_metric(["database"], 0)
        try:
            yield from self._broker()
            up.add_metric(["broker"], 1)
        except Exception as exc:
            log.warning("metrics: broker unreachable (%s)", exc)
            up.add_metric(["broker"], 0)
        yield up

    def _database(self) -> list[Metric]:
        # Built in full before any is yielded: a failure half-way leaves out all of them.
        # Only the runs in flight, through their partial index (~8 ms for 3 000 of 100 000
        # runs); all runs by status is a scan of the table (130 ms at 100 000), so finished
        # runs are counted as they finish instead (agentops_runs_finished_total).
        runs = GaugeMetricFamily(
            "agentops_runs_in_flight",
            "Runs queued, running or waiting for a person, by agent and status",
            labels=["agent", "status"],
        )
        counts = {(a, s): 0 for a in agents.CATALOGUE for s in Run.ACTIVE_STATUSES}
        active = Run.objects.active().order_by().values_list("agent", "status")
        counts.update(((a, s), n) for a, s, n in active.annotate(n=Count("id")))
        for (agent, status), n in sorted(counts.items()):
            runs.add_metric([agent, status], n)
        pending = GaugeMetricFamily(
            "agentops_approvals_pending", "Approvals waiting for a decision", labels=["kind"]
        )
        by_kind = dict.fromkeys(Approval.Kind.values, 0)
        waiting = Approval.objects.pending().order_by()
        by_kind.update(waiting.values_list("kind").annotate(n=Count("id")))
        for kind, n in by_kind.items():
            pending.add_metric([kind], n)
        oldest = waiting.aggregate(oldest=Min("requested_at"))["oldest"]
        age = (timezone.now() - oldest).total_seconds() if oldest else 0
        oldest_pending = GaugeMetricFamily(
            "agentops_approvals_oldest_pending_seconds",
            "How long the oldest pending approval has waited (0: none pending)",
            value=max(0.0, age),
        )
        return [runs, pending, oldest_pending]

    def _broker(self) -> list[Metric]:
        depth = queue.depth()
        return [
            GaugeMetricFamily(
                "agentops_queue_depth",
                "Run tasks waiting in the broker for a worker",
                value=depth,
            )
        ]


def exposition(*, processes: bool = True, state: bool = True) -> bytes:
    """The text format: every process's counters (multiprocess mode) or this one's, then the
    state."""
    registry = CollectorRegistry()
    if processes and settings.PROMETHEUS_MULTIPROC_DIR:
        MultiProcessCollector(registry, path=settings.PROMETHEUS_MULTIPROC_DIR)
    elif processes:
        # This process's own metrics (and its CPU, memory, GC figures).
        registry.register(_Registry(REGISTRY))
    if state:
        registry.register(StateCollector())
    return generate_latest(registry)


class _Registry:
    """Another registry's metrics as a collector of this one."""

    def __init__(self, registry: CollectorRegistry):
        self.registry = registry

    def collect(self) -> Iterable[Metric]:
        return self.registry.collect()


def refusal(authorization: str) -> tuple[int, str] | None:
    """(status, message) when a scrape's Authorization header does not carry METRICS_TOKEN;
    None when it does."""
    token = settings.METRICS_TOKEN
    if not token:
        return 404, "metrics are disabled: set METRICS_TOKEN\n"
    scheme, _, given = authorization.partition(" ")
    if scheme.lower() != "bearer" or not given:
        return 401, "a bearer token is required\n"
    if not hmac.compare_digest(given.strip().encode(), token.encode()):
        return 403, "wrong token\n"
    return None


def _scrape(request: HttpRequest, *, processes: bool, state: bool) -> HttpResponse:
    refused = refusal(request.headers.get("Authorization", ""))
    if refused is not None:
        status, message = refused
        if status == 404:
            raise Http404(message)
        response = HttpResponse(message, status=status)
        if status == 401:
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    started = time.monotonic()
    body = exposition(processes=processes, state=state)
    log.debug("metrics scraped in %.1f ms", (time.monotonic() - started) * 1000)
    return HttpResponse(body, content_type=CONTENT_TYPE)


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    return _scrape(request, processes=True, state=True)


@require_GET
def process_metrics_view(request: HttpRequest) -> HttpResponse:
    return _scrape(request, processes=True, state=False)


@require_GET
def state_metrics_view(request: HttpRequest) -> HttpResponse:
    return _scrape(request, processes=False, state=True)
