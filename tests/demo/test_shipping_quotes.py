"""The shipping-quotes demo: four carriers asked in one turn, the lookups run together.
Transactional: the calls run on tool threads (runs/engine/parallel.py)."""

import time
from decimal import Decimal

import pytest

from demo import tools as demo_tools
from runs import engine
from runs.models import Run

from .test_demo_flows import launch_default

pytestmark = pytest.mark.django_db(transaction=True)


def test_four_quotes_take_about_as_long_as_one(operator, no_enqueue, monkeypatch):
    monkeypatch.setattr(demo_tools, "QUOTE_API_SECONDS", 0.4)
    run = launch_default("shipping-quotes", operator)
    started = time.monotonic()
    assert engine.advance(run.pk, time_slice=60) == Run.Status.SUCCEEDED
    assert time.monotonic() - started < 1.2  # one after another: 1.6 s
    steps = [s.data for s in run.steps.filter(kind="tool").order_by("seq")]
    assert [d["args"]["carrier"] for d in steps] == list(demo_tools.CARRIERS)
    best = min((d["result"] for d in steps), key=lambda q: Decimal(q["price_eur"]))
    run.refresh_from_db()
    assert run.output.startswith(f"Cheapest: {best['carrier']} at {best['price_eur']} EUR.")
