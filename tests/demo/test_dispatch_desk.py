"""The dispatch-desk demo (on_failure="ask"): the usual warehouse refuses, the run waits for
an operator, and each choice leads to an answer that says what happened."""

import pytest

from runs import engine
from runs.models import Recovery, Run
from runs.steering import models as steering

from .test_demo_flows import launch_default

pytestmark = pytest.mark.django_db


def _held(operator) -> Run:
    run = launch_default("dispatch-desk", operator)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    run.refresh_from_db()
    recovery = Recovery.objects.get(run=run, status=Recovery.Status.OPEN)
    assert recovery.tool == "schedule_dispatch" and "US-EAST is closed" in recovery.error
    return run


def test_a_guided_retry_with_another_warehouse_dispatches_the_order(operator, no_enqueue):
    run = _held(operator)
    choice = steering.Choice("retry", args={"order_id": 13, "warehouse": "EU-WEST"})
    steering.choose(run, choice, by=operator)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    run.refresh_from_db()
    assert run.output == (
        "Order 13 ships today (from EU-WEST, not US-EAST as first asked): dispatch D-13-EU-WEST."
    )


def test_skip_and_instruct_are_followed_too(operator, no_enqueue):
    run = _held(operator)
    steering.choose(run, steering.Choice("skip", note="customer collects it"), by=operator)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    run.refresh_from_db()
    assert run.output == "Order 13 was not dispatched: olivia skipped it (customer collects it)."

    run = _held(operator)
    choice = steering.Choice("instruct", text="use the EU-WEST warehouse")
    steering.choose(run, choice, by=operator)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.SUCCEEDED
    run.refresh_from_db()
    assert run.output == "Order 13 ships today from EU-WEST: dispatch D-13-EU-WEST."
