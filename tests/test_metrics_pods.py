"""Metrics across hosts and pods (agentkit/metrics.py, agentops/monitoring.py,
agentops/metrics_server.py): each pod's processes share a directory of their own and are
scraped per pod, the database state is scraped once, and dead processes' live gauges go."""

import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from celery.signals import worker_process_shutdown
from django.conf import settings
from django.test import Client
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from agentkit import metrics
from agentops import metrics_server

from .test_metrics import TOKEN, Series

pytestmark = pytest.mark.django_db

# A process of this host that counts a step, opens a live socket, then waits to be killed.
COUNTING = """
from agentkit import metrics
metrics.steps.labels("agent-a", "llm").inc()
metrics.websocket_connections.labels("run").inc()
print(metrics.process_id(), flush=True)
import time; time.sleep(60)
"""


@pytest.fixture
def token(settings):
    settings.METRICS_TOKEN = TOKEN
    settings.PROMETHEUS_MULTIPROC_DIR = ""
    return TOKEN


def _killed_process(directory) -> str:
    """The id of a process that counted into `directory` and was killed (-9: no exit
    handler ran)."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    child = subprocess.Popen(
        [sys.executable, "-c", COUNTING], cwd=settings.BASE_DIR, env=env, stdout=subprocess.PIPE
    )
    process = child.stdout.readline().decode().strip()
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    return process


def _merged(directory) -> Series:
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(directory))
    return Series(generate_latest(registry).decode())


def test_a_killed_process_live_gauges_are_removed_and_its_counters_kept(tmp_path):
    dead = _killed_process(tmp_path)
    # Another host's process (a directory shared by containers) cannot be checked from here.
    other = "another-host-4242"
    (tmp_path / f"gauge_livesum_{other}.db").write_bytes(
        (tmp_path / f"gauge_livesum_{dead}.db").read_bytes()
    )
    assert _merged(tmp_path)("agentops_websocket_connections") == 2

    assert metrics.remove_dead_processes(str(tmp_path)) == [dead]

    series = _merged(tmp_path)
    assert series("agentops_websocket_connections") == 1  # the other host's, left alone
    assert series("agentops_steps_total", agent="agent-a") == 1  # totals never go down
    assert (tmp_path / f"counter_{dead}.db").exists()
    assert not (tmp_path / f"gauge_livesum_{dead}.db").exists()


def test_a_live_process_is_not_marked_dead(tmp_path):
    (tmp_path / f"gauge_livesum_{metrics.process_id()}.db").write_bytes(b"")
    assert metrics.remove_dead_processes(str(tmp_path)) == []
    assert (tmp_path / f"gauge_livesum_{metrics.process_id()}.db").exists()


def test_a_pool_child_that_ends_removes_its_live_gauges(tmp_path, monkeypatch):
    monkeypatch.setattr(metrics, "MULTIPROC_DIR", str(tmp_path))
    live = tmp_path / f"gauge_livesum_{metrics.process_id()}.db"
    live.write_bytes(b"")
    counter = tmp_path / f"counter_{metrics.process_id()}.db"
    counter.write_bytes(b"")
    worker_process_shutdown.send(sender=None, pid=os.getpid(), exitcode=0)
    assert not live.exists() and counter.exists()


# --- per pod: the processes' counters, and the state once ------------------------------------
def _get(path: str) -> Series:
    response = Client().get(path, headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200, response.content
    return Series(response.content.decode())


def test_the_pod_endpoint_has_the_counters_and_the_state_endpoint_the_state(token):
    metrics.steps.labels("agent-b", "llm").inc()
    processes = _get("/metrics/processes").names()
    state = _get("/metrics/state").names()
    both = _get("/metrics").names()
    assert "agentops_steps_total" in processes and "agentops_steps_total" not in state
    in_state = {"agentops_runs_in_flight", "agentops_approvals_pending", "agentops_queue_depth"}
    assert in_state <= state and not in_state & processes
    assert both == processes | state


@pytest.mark.parametrize("path", ["/metrics/processes", "/metrics/state"])
def test_each_endpoint_requires_the_token(token, path, settings):
    assert Client().get(path).status_code == 401
    assert Client().get(path, headers={"Authorization": "Bearer nope"}).status_code == 403
    settings.METRICS_TOKEN = ""
    assert Client().get(path, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 404


def test_a_worker_pod_serves_its_counters_on_its_own_port(token, tmp_path, settings):
    _killed_process(tmp_path)  # a process of the pod that counted a step
    settings.PROMETHEUS_MULTIPROC_DIR = str(tmp_path)
    server = metrics_server.start(0, host="127.0.0.1")
    base = f"http://127.0.0.1:{server.server_port}"
    try:
        request = urllib.request.Request(
            f"{base}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read().decode()
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        series = Series(body)
        assert series("agentops_steps_total", agent="agent-a") == 1
        assert "agentops_runs_in_flight" not in series.names()  # the state: the web's, once
        for headers, status in (({}, 401), ({"Authorization": "Bearer nope"}, 403)):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(
                    urllib.request.Request(f"{base}/metrics", headers=headers), timeout=10
                )
            assert refused.value.code == status
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{base}/other", timeout=10)
        assert missing.value.code == 404
    finally:
        server.shutdown()
        server.server_close()
