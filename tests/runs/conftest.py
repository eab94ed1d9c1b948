from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from runs import engine, queue
from runs.models import Run

from . import harness
from .factories import add_steps, make_run


@pytest.fixture
def test_agent():
    harness.CALLS.clear()
    harness.FAILURES_LEFT.clear()
    agent = harness.register_agent()
    yield agent
    harness.unregister_agent()


@pytest.fixture
def script(monkeypatch) -> Callable[..., harness.Script]:
    """Install a scripted model for every run: `provider = script(turns, errors=...)`."""

    def install(turns=(), **kwargs) -> harness.Script:
        provider = harness.Script(turns, **kwargs)
        monkeypatch.setattr("agentkit.agents.provider_for_run", lambda run: provider)
        return provider

    return install


@pytest.fixture
def launch(test_agent, no_enqueue) -> Callable[..., Run]:
    """Launch a run of the test agent; keyword arguments override its limits."""

    def make(task: str = "test", script: str = "", **limits) -> Run:
        if "max_cost_usd" in limits:
            limits["max_cost_usd"] = Decimal(str(limits["max_cost_usd"]))
        return engine.launch(
            agent=test_agent,
            input={"task": task, "script": script},
            limits=replace(test_agent.limits, **limits) if limits else None,
            provider="scripted",
        )

    return make


@pytest.fixture(autouse=True)
def _clock(monkeypatch):
    # t_age_run moves this clock ahead: time passing during a long tool call.
    harness.CLOCK.skew = timedelta(0)
    monkeypatch.setattr(timezone, "now", harness.CLOCK.now)


@pytest.fixture(autouse=True)
def _outbox_mail(settings):
    # pytest-django swaps in the locmem backend; the demo tools' mail lands in the outbox
    # table in the product, and the ledger tests count rows there.
    settings.EMAIL_BACKEND = "demo.mail.OutboxEmailBackend"


@pytest.fixture
def plain_user(django_user_model):
    # Transactional tests flush the role groups the data migration made; a plain user is
    # all the engine needs to see as the one who decided.
    return django_user_model.objects.create_user(username="olivia", password="pw-olivia")


@pytest.fixture
def backlog(monkeypatch):
    """Other runs wait in the broker for a worker thread (so every slice is handed back)."""
    monkeypatch.setattr(queue, "runs_waiting", lambda: True)


@pytest.fixture
def run(operator, no_enqueue) -> Run:
    """A running run of the demo agent, made the way the product makes it, with steps 1..5."""
    run = make_run(operator, status=Run.Status.RUNNING)
    add_steps(run, 4)
    return run


@pytest.fixture
def as_viewer(viewer) -> Client:
    """A signed-in viewer's browser session (the API takes sessions as well as tokens)."""
    client = Client()
    client.force_login(viewer)
    return client
