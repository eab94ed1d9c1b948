"""The Prometheus metrics that count events: steps, model and tool calls, decisions, sweeps,
live sockets (states are read at scrape time instead: agentops/monitoring.py).
Imports nothing of the project, so the engine, runs and approvals can all count.
Why and how: docs/design/modules.md."""

import atexit
import os
import re
import socket
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, multiprocess, values

MULTIPROC_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")


def _host() -> str:
    # Files are named <kind>_<process>.db and split on "_": no underscore in a process's name.
    return re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname())[:60] or "host"


_HOST = _host()
_process = f"{_HOST}-{os.getpid()}"


def _forked() -> None:
    global _process
    _process = f"{_HOST}-{os.getpid()}"


# prometheus_client asks for it on every increment: kept, not a getpid() call each time.
os.register_at_fork(after_in_child=_forked)


def process_id() -> str:
    """This process in file names: host and pid. Containers sharing the directory (compose)
    all have pid 1 or so; their host names (container ids) tell them apart."""
    return _process


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process, alive
    return True


def remove_dead_processes(directory: str) -> list[str]:
    """Mark dead (their live gauges removed) the processes of this host whose files are in
    `directory` and whose pid is no longer running; returns their ids. Another host's files
    (a directory shared by containers) are left to that host's processes."""
    dead = set()
    for name in os.listdir(directory):
        process = name.rpartition("_")[2].removesuffix(".db")
        host, _, pid = process.rpartition("-")
        if host == _HOST and pid.isdigit() and not _alive(int(pid)):
            dead.add(process)
    for process in dead:
        multiprocess.mark_process_dead(process, directory)
    return sorted(dead)


def mark_this_process_dead() -> None:
    """This process is ending: its live gauges stop counting (its counters stay)."""
    if MULTIPROC_DIR:
        multiprocess.mark_process_dead(process_id(), MULTIPROC_DIR)


if MULTIPROC_DIR:
    os.makedirs(MULTIPROC_DIR, exist_ok=True)
    # Before any metric is made. Called again after a fork (prefork pool), so a child gets
    # its own files.
    values.ValueClass = values.MultiProcessValue(process_identifier=process_id)
    # A restarted container has the same host name and pid as the process it replaces: its
    # live gauges (open sockets) start from nothing, not from the dead process's. Counters
    # carry on from where it stopped, which Prometheus reads as the same series going up.
    multiprocess.mark_process_dead(process_id(), MULTIPROC_DIR)
    remove_dead_processes(MULTIPROC_DIR)
    atexit.register(mark_this_process_dead)

_children: dict[tuple[Any, ...], Any] = {}


def labelled(metric: Any, *values: str) -> Any:
    """metric.labels(*values), remembered: labels() checks and locks on every call, a few
    microseconds a step on the engine's hot path. The label values are few (agents, models,
    tools, step kinds), so is this."""
    key = (id(metric), *values)
    child = _children.get(key)
    if child is None:
        child = _children.setdefault(key, metric.labels(*values))
    return child


# Seconds, from a fast model turn to a slow one; tools are usually faster.
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120)
# A person deciding: seconds to a day.
DECISION_BUCKETS = (5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400)

steps = Counter("agentops_steps", "Timeline steps committed, by agent and kind", ["agent", "kind"])
runs_finished = Counter(
    "agentops_runs_finished",
    "Runs that ended, by agent, final status and termination reason",
    ["agent", "status", "reason"],
)
model_calls = Counter(
    "agentops_model_calls",
    "Model calls, by model and outcome (ok: a response was recorded; error: a failed attempt)",
    ["model", "outcome"],
)
model_tokens = Counter(
    "agentops_model_tokens",
    "Tokens of recorded model calls, by model and direction",
    ["model", "direction"],
)
model_cost = Counter(
    "agentops_model_cost_usd", "Cost of recorded model calls in USD, by model", ["model"]
)
model_seconds = Histogram(
    "agentops_model_call_seconds",
    "Latency of recorded model calls, by model",
    ["model"],
    buckets=LATENCY_BUCKETS,
)
tool_calls = Counter(
    "agentops_tool_calls",
    "Tool calls recorded, by tool and outcome (error: the call failed or was refused)",
    ["tool", "outcome"],
)
tool_cost = Counter(
    "agentops_tool_cost_usd", "Cost of recorded tool calls in USD (paid APIs), by tool", ["tool"]
)
tool_seconds = Histogram(
    "agentops_tool_call_seconds",
    "Duration of recorded tool calls (retries included), by tool",
    ["tool"],
    buckets=LATENCY_BUCKETS,
)
lease_takeovers = Counter(
    "agentops_lease_takeovers",
    "Runs resumed by a worker after the previous holder's lease expired, by agent",
    ["agent"],
)
lease_expiries = Counter(
    "agentops_lease_expiries",
    "Running runs whose lease had expired when a sweep found them (re-enqueued)",
)
sweep_resent = Counter(
    "agentops_sweep_resent",
    "Queued runs whose message a sweep sent again (lost, or waiting for over a minute)",
)
sweeps = Counter("agentops_sweeps", "Lease sweeps run")
decision_seconds = Histogram(
    "agentops_approval_decision_seconds",
    "Time from an approval's request to its decision, by kind and outcome",
    ["kind", "status"],
    buckets=DECISION_BUCKETS,
)
approvals_expired = Counter(
    "agentops_approvals_expired", "Approvals that expired without a decision, by kind", ["kind"]
)
model_calls_in_flight = Gauge(
    "agentops_model_calls_in_flight",
    "Model calls a worker awaits on its event loop now, holding no thread",
    multiprocess_mode="livesum",
)
websocket_connections = Gauge(
    "agentops_websocket_connections",
    "Open live WebSocket connections, by stream",
    ["stream"],
    multiprocess_mode="livesum",
)
