"""GET /metrics: behind its token, and the series move when runs happen, in one process or
added up over several (prometheus_client's multiprocess mode)."""

import asyncio
import dataclasses
import json
import re
import socket
import time
import uuid
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import connections, transaction
from django.db.models import Count, Sum
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from agentkit.agents import get_agent, register
from agentkit.llm import LLMTransientError
from agentkit.llm.scripted import text, tool_use
from agentkit.verification import Verifier
from agentops.asgi import application
from agentops.celery import app as celery_app
from approvals import decisions
from approvals.models import Approval
from runs import engine, queue
from runs.models import Run, Step
from tests.conftest import on_postgres
from tests.runs import harness
from tests.runs.engine.test_tool_cost import t_paid_lookup  # noqa: F401 (registers it)
from tests.runs.worker_processes import celery_worker, one_shot, stop

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(settings.BASE_DIR)
TOKEN = "scrape-token-for-tests"


@pytest.fixture
def token(settings):
    settings.METRICS_TOKEN = TOKEN
    settings.PROMETHEUS_MULTIPROC_DIR = ""
    return TOKEN


@pytest.fixture
def test_agent():
    agent = harness.register_agent()
    yield agent
    harness.unregister_agent()


def default_input(slug: str) -> dict:
    agent = get_agent(slug)
    initial = {name: f.initial for name, f in agent.input_form.base_fields.items()}
    data, errors = agent.validate_input({k: v for k, v in initial.items() if v is not None})
    assert not errors
    return data


def scrape(**headers) -> "Series":
    response = Client().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}", **headers})
    assert response.status_code == 200, response.content
    return Series(response.content.decode())


class Series:
    """The samples of one scrape: series("name", label=value) is the sum of the samples of
    that name whose labels include these (0 when there are none)."""

    def __init__(self, body: str):
        self.samples = [
            sample for family in text_string_to_metric_families(body) for sample in family.samples
        ]

    def __call__(self, name: str, **labels: str) -> float:
        return sum(
            s.value
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )

    def names(self) -> set[str]:
        return {s.name for s in self.samples}


# --- the endpoint ----------------------------------------------------------------------------
def test_it_does_not_exist_without_a_configured_token(settings):
    settings.METRICS_TOKEN = ""
    assert Client().get("/metrics").status_code == 404
    assert Client().get("/metrics", headers={"Authorization": "Bearer "}).status_code == 404


def test_it_requires_the_token(token):
    missing = Client().get("/metrics")
    assert missing.status_code == 401
    assert missing["WWW-Authenticate"].startswith("Bearer")
    assert Client().get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 403
    assert Client().get("/metrics", headers={"Authorization": f"Basic {TOKEN}"}).status_code == 401
    good = Client().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert good.status_code == 200
    assert good["Content-Type"].startswith("text/plain; version=0.0.4")
    names = Series(good.content.decode()).names()
    assert {"agentops_queue_depth", "agentops_metrics_source_up"} <= names


def test_it_is_not_redirected_to_https_in_production(token, settings):
    # Prometheus scrapes a web process over plain HTTP inside the network.
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_REDIRECT_EXEMPT = [r"^metrics$"]
    assert Client().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert Client().get("/healthz").status_code == 301


def test_the_sample_dashboard_uses_only_series_that_exist(token):
    body = Client().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).content
    known = set()
    for family in text_string_to_metric_families(body.decode()):
        known |= {family.name + suffix for suffix in ("", "_total", "_bucket", "_count", "_sum")}
    used = set(re.findall(r"agentops_\w+", (ROOT / "docs/grafana-dashboard.json").read_text()))
    assert used and used <= known, used - known


STATE_SERIES = (
    "agentops_runs_in_flight",
    "agentops_approvals_pending",
    "agentops_approvals_oldest_pending_seconds",
    "agentops_queue_depth",
    "agentops_metrics_source_up",
)


def test_the_sample_dashboard_covers_what_operators_watch():
    exprs = [
        target["expr"]
        for panel in json.loads((ROOT / "docs/grafana-dashboard.json").read_text())["panels"]
        for target in panel.get("targets", [])
    ]
    text = "\n".join(exprs)
    for needed in (
        "agentops_runs_in_flight",  # runs by status
        "agentops_runs_finished_total",
        "agentops_approvals_pending",  # approvals waiting
        "agentops_approvals_oldest_pending_seconds",  # and their age
        "agentops_approval_decision_seconds_bucket",  # decision times
        "agentops_model_cost_usd_total",  # model spend
        'agentops_tool_calls_total{outcome="error"}',  # tool errors
        "agentops_queue_depth",
        "agentops_model_calls_in_flight",  # against each worker's limit
    ):
        assert needed in text, needed
    # The state is the same from every web process: read with max or min, so that scraping
    # it from more than one target does not multiply it.
    for expr in exprs:
        for name in STATE_SERIES:
            if name in expr:
                assert re.search(rf"(max|min)( by \([^)]*\))? ?\({name}\b", expr), expr


# --- the series move when runs happen ------------------------------------------------------------
def test_a_demo_run_moves_steps_model_tool_and_approval_series(
    token, operator, approver, no_enqueue
):
    before = scrape()
    agent = get_agent("refund-desk")
    run = engine.launch(
        agent=agent, input=default_input("refund-desk"), launched_by=operator, provider="scripted"
    )
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    waiting = scrape()
    assert waiting("agentops_approvals_pending", kind="action") == 1
    assert waiting("agentops_approvals_oldest_pending_seconds") >= 0
    assert waiting("agentops_runs_in_flight", agent="refund-desk", status="waiting") == 1

    refund = Approval.objects.get(run=run, status=Approval.Status.PENDING)
    Approval.objects.filter(pk=refund.pk).update(
        requested_at=timezone.now() - timedelta(seconds=90)
    )
    decisions.decide(refund.pk, user=approver, decision="approve")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    email = Approval.objects.get(run=run, status=Approval.Status.PENDING)
    decisions.decide(email.pk, user=approver, decision="approve")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    after = scrape()

    def moved(name: str, **labels: str) -> float:
        return after(name, **labels) - before(name, **labels)

    steps = run.steps.all()
    llm = steps.filter(kind=Step.Kind.LLM)
    model = llm.first().data["model"]
    totals = llm.aggregate(
        tokens_in=Sum("tokens_in"), tokens_out=Sum("tokens_out"), cost=Sum("cost_usd")
    )
    for kind, n in steps.values_list("kind").annotate(n=Count("id")):
        assert moved("agentops_steps_total", agent="refund-desk", kind=kind) == n, kind
    assert moved("agentops_model_calls_total", model=model, outcome="ok") == llm.count() > 0
    assert moved("agentops_model_call_seconds_count", model=model) == llm.count()
    assert (
        moved("agentops_model_tokens_total", model=model, direction="input") == totals["tokens_in"]
    )
    assert (
        moved("agentops_model_tokens_total", model=model, direction="output")
        == totals["tokens_out"]
    )
    assert (
        Decimal(str(moved("agentops_model_cost_usd_total", model=model))).quantize(
            Decimal("0.000001")
        )
        == totals["cost"]
        > 0
    )
    for tool in ("lookup_order", "issue_refund", "send_customer_email"):
        assert moved("agentops_tool_calls_total", tool=tool, outcome="ok") == 1, tool
        assert moved("agentops_tool_call_seconds_count", tool=tool) == 1, tool
    assert moved("agentops_tool_calls_total", outcome="error") == 0
    assert (
        moved(
            "agentops_runs_finished_total",
            agent="refund-desk",
            status="succeeded",
            reason="completed",
        )
        == 1
    )

    # Time to decision: both approvals, one of them after 90 s.
    decided = {"kind": "action", "status": "approved"}
    assert moved("agentops_approval_decision_seconds_count", **decided) == 2
    assert moved("agentops_approval_decision_seconds_bucket", le="60.0", **decided) == 1
    assert moved("agentops_approval_decision_seconds_bucket", le="120.0", **decided) == 2
    assert 90 <= moved("agentops_approval_decision_seconds_sum", **decided) < 100

    # State, read at scrape time.
    in_flight = {(s.labels["status"]) for s in after.samples if s.name == "agentops_runs_in_flight"}
    assert in_flight == {"queued", "running", "waiting"}  # a zero for each, not a gap
    assert after("agentops_runs_in_flight", agent="refund-desk") == 0
    assert after("agentops_approvals_pending") == 0
    assert after("agentops_metrics_source_up", source="database") == 1


def test_tool_errors_and_model_errors_are_counted_by_tool_and_model(
    token, test_agent, no_enqueue, monkeypatch
):
    provider = harness.Script(
        [[tool_use("t_fail", n=1), tool_use("t_echo", text="x")], [text("done")]],
        errors=[LLMTransientError("overloaded", status=529)],
    )
    monkeypatch.setattr("agentkit.agents.provider_for_run", lambda run: provider)
    before = scrape()
    run = engine.launch(agent=test_agent, input={"task": "t", "script": ""}, provider="scripted")
    assert harness.drive(run)[-1] == Run.Status.SUCCEEDED
    after = scrape()
    assert (
        after("agentops_tool_calls_total", tool="t_fail", outcome="error")
        - before("agentops_tool_calls_total", tool="t_fail", outcome="error")
        == 1
    )
    assert (
        after("agentops_tool_calls_total", tool="t_echo", outcome="ok")
        - before("agentops_tool_calls_total", tool="t_echo", outcome="ok")
        == 1
    )
    labels = {"model": "claude-sonnet-4-6", "outcome": "error"}
    assert (
        after("agentops_model_calls_total", **labels)
        - before("agentops_model_calls_total", **labels)
        == 1
    )


def test_a_model_verifiers_calls_and_a_paid_tools_cost_are_counted(
    token, test_agent, no_enqueue, monkeypatch
):
    agent = register(
        dataclasses.replace(
            test_agent,
            tools=(*test_agent.tools, "t_paid_lookup"),
            verifier=Verifier(prompt="Check it.", model="claude-haiku-4-5"),
        )
    )
    provider = harness.Script(
        [[tool_use("t_paid_lookup", q="a")], [text("done")]], verifier_turns=[[text("PASS")]]
    )
    monkeypatch.setattr("agentkit.agents.provider_for_run", lambda run: provider)
    before = scrape()
    run = engine.launch(agent=agent, input={"task": "t", "script": ""}, provider="scripted")
    assert harness.drive(run)[-1] == Run.Status.SUCCEEDED
    after = scrape()
    (verify,) = run.steps.filter(kind=Step.Kind.VERIFY)
    haiku = {"model": "claude-haiku-4-5"}
    assert after("agentops_model_cost_usd_total", **haiku) - before(
        "agentops_model_cost_usd_total", **haiku
    ) == pytest.approx(float(verify.cost_usd))
    paid = {"tool": "t_paid_lookup"}
    assert after("agentops_tool_cost_usd_total", **paid) - before(
        "agentops_tool_cost_usd_total", **paid
    ) == pytest.approx(0.05)


def test_steps_of_a_rolled_back_transaction_count_nothing(token, test_agent, no_enqueue):
    # A replay runs the engine in a transaction that is rolled back: no metric may move.
    before = scrape()
    with pytest.raises(RuntimeError), transaction.atomic():
        engine.launch(agent=test_agent, input={"task": "t", "script": ""}, provider="scripted")
        raise RuntimeError("rolled back")
    assert scrape()("agentops_steps_total") == before("agentops_steps_total")


def test_the_sweep_counts_lease_expiries_and_the_takeover(token, test_agent, no_enqueue):
    run = engine.launch(agent=test_agent, input={"task": "t", "script": ""}, provider="scripted")
    past = timezone.now() - timedelta(minutes=5)
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.RUNNING, lease_owner="dead-worker", lease_expires_at=past, started_at=past
    )
    before = scrape()
    assert engine.sweep() == 1
    swept = scrape()
    assert swept("agentops_sweeps_total") - before("agentops_sweeps_total") == 1
    assert swept("agentops_lease_expiries_total") - before("agentops_lease_expiries_total") == 1
    assert swept("agentops_sweep_resent_total") == before("agentops_sweep_resent_total")
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    after = scrape()
    labels = {"agent": harness.AGENT}
    assert (
        after("agentops_lease_takeovers_total", **labels)
        - before("agentops_lease_takeovers_total", **labels)
        == 1
    )


def test_queue_depth_is_read_from_the_broker(token):
    before = scrape()("agentops_queue_depth")
    queue.enqueue(uuid.uuid4())  # nobody consumes in this process
    try:
        assert scrape()("agentops_queue_depth") == before + 1
    finally:
        with celery_app.connection_for_write() as conn:
            conn.default_channel.queue_purge(celery_app.conf.task_default_queue)


def test_an_unreachable_broker_leaves_the_rest(token, monkeypatch):
    def down():
        raise ConnectionError("broker down")

    monkeypatch.setattr(queue, "depth", down)
    series = scrape()
    assert series("agentops_metrics_source_up", source="broker") == 0
    assert series("agentops_metrics_source_up", source="database") == 1
    assert "agentops_queue_depth" not in series.names()


@pytest.mark.asyncio
async def test_websocket_connections_are_counted_while_open(token, operator):
    from asgiref.sync import sync_to_async

    @sync_to_async
    def connections_open() -> float:
        try:
            return scrape()("agentops_websocket_connections", stream="dashboard")
        finally:
            connections.close_all()  # this thread's: the test database is dropped after

    @sync_to_async
    def cookie() -> tuple[bytes, bytes]:
        client = Client()
        client.force_login(operator)
        return (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())

    before = await connections_open()
    socket = WebsocketCommunicator(
        application, "/ws/runs/", headers=[(b"origin", b"http://testserver"), await cookie()]
    )
    connected, _ = await socket.connect(timeout=5)
    assert connected
    # Counted once admitted, which follows the handshake (runs/consumers.py `admit`).
    async with asyncio.timeout(10):
        while await connections_open() != before + 1:
            await asyncio.sleep(0.05)
    await socket.disconnect()
    assert await connections_open() == before


# --- several processes -------------------------------------------------------------------------
def test_two_worker_processes_add_up(token, settings, test_agent, no_enqueue, tmp_path):
    """Each worker process writes its own files; the endpoint adds them up."""
    runs = [
        engine.launch(
            agent=test_agent,
            input={"task": "t", "script": "refund_then_email"},
            provider="scripted",
        )
        for _ in range(2)
    ]
    connections.close_all()  # the workers write the database (SQLite: one writer at a time)
    workers = [
        one_shot("advance", str(run.pk), PROMETHEUS_MULTIPROC_DIR=str(tmp_path)) for run in runs
    ]
    for worker in workers:
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err[-3000:]
        assert out.strip() == Run.Status.SUCCEEDED, err[-3000:]

    # Two processes, two sets of files.
    assert len(list(tmp_path.glob("counter_*.db"))) == 2
    settings.PROMETHEUS_MULTIPROC_DIR = str(tmp_path)
    series = scrape()
    agent = {"agent": harness.AGENT}
    # Launched here (this process is not in the directory): the workers' steps are the rest.
    worked = Step.objects.filter(run__in=runs).exclude(seq=1)
    assert series("agentops_steps_total", **agent) == worked.count() > 0
    assert series("agentops_tool_calls_total", tool="issue_refund", outcome="ok") == 2
    assert series("agentops_tool_calls_total", tool="send_customer_email", outcome="ok") == 2
    assert series("agentops_model_calls_total", outcome="ok") == 6
    assert series("agentops_runs_finished_total", status="succeeded", **agent) == 2
    # Each process's share is in its own file: both did half.
    for path in tmp_path.glob("counter_*.db"):
        assert _steps_in(path) == worked.count() / 2
    # And the state series are there beside them.
    assert series("agentops_runs_in_flight", **agent) == 0
    assert series("agentops_metrics_source_up", source="database") == 1


def _steps_in(path: Path) -> float:
    from prometheus_client.multiprocess import MultiProcessCollector

    return sum(
        s.value
        for metric in MultiProcessCollector.merge([str(path)])
        for s in metric.samples
        if s.name == "agentops_steps_total"
    )


# --- real Celery workers on Redis --------------------------------------------------------------
@on_postgres
@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL (a broker other processes see)")
def test_two_celery_workers_add_up(token, settings, test_agent, tmp_path):

    celery_app.control.purge()
    connections.close_all()
    workers = [
        celery_worker(f"metrics{i}", concurrency=1, PROMETHEUS_MULTIPROC_DIR=str(tmp_path))
        for i in (1, 2)
    ]
    try:
        # Both consume before the runs are sent, so both get some.
        names = {f"metrics{i}@{socket.gethostname()}" for i in (1, 2)}
        deadline = time.monotonic() + 90
        while names - {name for reply in celery_app.control.ping(timeout=1) for name in reply}:
            assert time.monotonic() < deadline, "the workers did not start"
        runs = [
            engine.launch(
                agent=test_agent,
                input={"task": f"t{i}", "script": "refund_then_email"},
                provider="scripted",
            )
            for i in range(8)
        ]
        deadline = time.monotonic() + 120
        while (
            Run.objects.filter(pk__in=[r.pk for r in runs], status=Run.Status.SUCCEEDED).count() < 8
        ):
            assert time.monotonic() < deadline, "the runs did not finish"
            time.sleep(0.3)
    finally:
        for worker in workers:
            stop(worker)

    settings.PROMETHEUS_MULTIPROC_DIR = str(tmp_path)
    series = scrape()
    worked = Step.objects.filter(run__in=runs).exclude(seq=1).count()
    agent = {"agent": harness.AGENT}
    assert series("agentops_steps_total", **agent) == worked
    assert series("agentops_runs_finished_total", status="succeeded", **agent) == 8
    assert series("agentops_tool_calls_total", tool="issue_refund", outcome="ok") == 8
    shares = [_steps_in(path) for path in tmp_path.glob("counter_*.db")]
    assert len(shares) == 2 and sum(shares) == worked and all(shares)
