"""The chaos suite's agent and tools, loaded by every process bench/chaos.py starts.

    celery -A bench.chaos_app worker ...        (the Celery app, with the chaos agent)
    daphne bench.chaos_app:application          (the ASGI app, with the chaos agent)

Agent `chaos-loop`: for i in 0..steps-1 it calls `chaos_charge` (honours idempotency keys,
like a payment API) then `chaos_notify` (cannot de-duplicate, like an e-mail gateway), then,
with `gate`, `chaos_transfer` (always gated: a person approves it), then says "Done.".

Each tool is slow on purpose (a side effect in the middle of 0.1-0.5 s), so a kill -9 often
lands between an effect and the record of its outcome. Effects go to a SQLite file outside
the database under test (CHAOS_EFFECTS_DB, made by tests/support/effect_ledger.py): an
external system that Postgres restarts do not touch. `ref` names the logical call (run tag +
iteration); the engine's idempotency key comes in the tool's context. chaos_charge applies a
key once, as a key-honouring service does, and logs every call; the other two apply every call
they get, so a repeated call shows up as a second row for one key.
"""

import os
import random
import sqlite3
import sys
import time
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")

import django  # noqa: E402

django.setup()

from celery.signals import worker_ready  # noqa: E402
from django import forms  # noqa: E402

from agentkit.agents import Agent, GateRules, Limits, get_agent, register  # noqa: E402
from agentkit.llm.scripted import text, tool_use  # noqa: E402
from agentkit.tools import Blast, ToolContext, tool  # noqa: E402
from agentops.celery import app  # noqa: E402

AGENT = "chaos-loop"
# A call takes its tool's timeout as lease: the lease the suite sets (a dead worker's runs are
# taken over within it), so "stuck beyond 2 x lease" means the same for every step.
TIMEOUT = float(os.environ.get("AGENTOPS_LEASE_SECONDS", "5"))


def effects_db() -> sqlite3.Connection:
    db = sqlite3.connect(os.environ["CHAOS_EFFECTS_DB"], timeout=60, isolation_level=None)
    db.execute("pragma journal_mode=wal")
    db.execute("pragma synchronous=normal")
    return db


def _effect(tool_name: str, ref: str, ctx: ToolContext, *, honour_key: bool) -> dict:
    time.sleep(random.uniform(0.05, 0.3))
    db = effects_db()
    try:
        db.execute(
            "insert into call values (?, ?, ?, ?, ?)",
            (ref, ctx.idempotency_key, tool_name, os.getpid(), time.time()),
        )
        db.execute("begin immediate")
        seen = (
            honour_key
            and db.execute(
                "select 1 from effect where key = ? and tool = ?", (ctx.idempotency_key, tool_name)
            ).fetchone()
        )
        if not seen:
            db.execute(
                "insert into effect values (?, ?, ?, ?, ?, ?)",
                (ref, ctx.idempotency_key, tool_name, ctx.run_id, os.getpid(), time.time()),
            )
        db.execute("commit")
    finally:
        db.close()
    # The answer travels back after the effect: the window a kill -9 makes "outcome unknown".
    time.sleep(random.uniform(0.05, 0.2))
    return {"ref": ref, "ok": True, "replayed": bool(seen)}


@tool(
    reversible=False,
    blast=Blast.LOW,
    accepts_idempotency_key=True,
    timeout_seconds=TIMEOUT,
    name="chaos_charge",
)
def chaos_charge(ref: str, amount: int, ctx: ToolContext) -> dict:
    """Charges `amount` (chaos bench only); honours the idempotency key."""
    return _effect("chaos_charge", ref, ctx, honour_key=True)


@tool(reversible=False, blast=Blast.LOW, timeout_seconds=TIMEOUT, name="chaos_notify")
def chaos_notify(ref: str, ctx: ToolContext) -> dict:
    """Sends a notification (chaos bench only); cannot de-duplicate."""
    return _effect("chaos_notify", ref, ctx, honour_key=False)


@tool(reversible=False, blast=Blast.MEDIUM, timeout_seconds=TIMEOUT, name="chaos_transfer")
def chaos_transfer(ref: str, ctx: ToolContext) -> dict:
    """Transfers money (chaos bench only); always gated; cannot de-duplicate."""
    return _effect("chaos_transfer", ref, ctx, honour_key=False)


class ChaosInput(forms.Form):
    tag = forms.CharField(max_length=64)
    steps = forms.IntegerField(min_value=1, max_value=200)
    gate = forms.BooleanField(required=False)


def _script(data: dict) -> list:
    tag = data["tag"]
    turns = []
    for i in range(int(data["steps"])):
        turns.append([tool_use("chaos_charge", ref=f"{tag}:c{i}", amount=i + 1)])
        turns.append([tool_use("chaos_notify", ref=f"{tag}:n{i}")])
    if data.get("gate"):
        turns.append([tool_use("chaos_transfer", ref=f"{tag}:t")])
    return [*turns, [text("Done.")]]


LIMITS = Limits(500, Decimal("1000"), 3600, 5)


def register_chaos_agent() -> Agent:
    return get_agent(AGENT) or register(
        Agent(
            slug=AGENT,
            title="Chaos loop",
            description="Slow tools with side effects, one gated (chaos bench only).",
            model="claude-sonnet-4-6",
            system_prompt="Charge, notify, repeat; then transfer.",
            tools=("chaos_charge", "chaos_notify", "chaos_transfer"),
            input_form=ChaosInput,
            prompt=lambda d: f"Run the chaos loop {d['steps']} times for {d['tag']}.",
            script=_script,
            limits=LIMITS,
            max_limits=LIMITS,
            gates=GateRules(always_gate=("chaos_transfer",)),
        )
    )


register_chaos_agent()


@worker_ready.connect
def mark_ready(**kwargs) -> None:
    """bench/chaos.py: a restarted worker counts as back once it consumes."""
    marker = Path(os.environ["CHAOS_EFFECTS_DB"]).parent / f"ready-{os.getpid()}"
    marker.write_text("ready")
    import threading

    threading.Thread(target=_write_pool_stats, daemon=True, name="chaos-pool-stats").start()


def _write_pool_stats() -> None:
    """Every second, this worker's database pool statistics, for bench/chaos.py to print
    after the restarts (daphne answers them on /-/pool: tests/support/pool_stats_app.py)."""
    import json

    from tests.support.pool_stats_app import pool_stats

    path = Path(os.environ["CHAOS_EFFECTS_DB"]).parent / f"pool-{os.getpid()}.json"
    while True:
        time.sleep(1.0)
        try:
            path.write_text(json.dumps({"at": time.time(), **pool_stats()}))
        except Exception as exc:  # a report, never a reason for the worker to fail
            path.write_text(json.dumps({"at": time.time(), "error": repr(exc)}))


def __getattr__(name: str):
    # daphne asks for `application`; workers never build the ASGI app.
    if name == "application":
        # The project's app, plus GET /-/pool (its pool statistics) for the bench's report.
        from tests.support.pool_stats_app import application

        return application
    raise AttributeError(name)


__all__ = ["app"]
