"""Property of the run timeline's hash chain (Run.verify_chain): a change of any one hashed
field of any one step, written behind the engine's back, is found, at that step or the one
after it. Each example tampers inside a savepoint that is rolled back, so one finished run
serves them all."""

import json
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentkit.llm.scripted import text, tool_use
from runs.models import Run, Step

from .harness import drive, tamper

pytestmark = pytest.mark.django_db

HASHED = ("run", "seq", "kind", "data", "cost_usd", "created_at", "prev_hash", "hash")
# Columns outside the hash today: a change to them is not found (see the xfail below).
UNHASHED = ("tokens_in", "tokens_out", "latency_ms")

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)


@pytest.fixture
def finished(launch, script) -> tuple[Run, Run]:
    """A finished run with model, tool and status steps, and another run to move steps to."""
    script([[tool_use("t_echo", text="a")], [tool_use("t_echo", text="b")], [text("done")]])
    run = launch()
    drive(run)
    assert run.status == Run.Status.SUCCEEDED
    assert run.verify_chain() == (True, None)
    # A run with no step yet, so a step moved there keeps its seq.
    other = Run.objects.create(
        agent=run.agent,
        agent_config={},
        provider="scripted",
        input={},
        max_steps=1,
        max_cost_usd=Decimal(1),
        max_seconds=1,
        max_consecutive_errors=1,
    )
    return run, other


def new_value(step: Step, name: str, other: Run, data) -> tuple[str, object]:
    """(SQL column, a value different from the step's) for field `name`."""
    if name == "run":
        return "run_id", other.pk.hex
    if name == "seq":
        return "seq", step.seq + data.draw(st.integers(50, 1000))
    if name == "kind":
        kinds = [k for k in Step.Kind.values if k != step.kind]
        return "kind", data.draw(st.sampled_from(kinds))
    if name == "data":
        key = data.draw(st.sampled_from([*step.data, "extra"]))
        value = data.draw(json_values.filter(lambda v: v != step.data.get(key, object())))
        changed = {**step.data, key: value}
        if data.draw(st.booleans()) and key in step.data:
            changed.pop(key)
        return "data", json.dumps(changed)
    if name == "cost_usd":
        delta = data.draw(st.integers(1, 10**6)) * Decimal("0.000001")
        return "cost_usd", step.cost_usd + delta
    if name == "created_at":
        return "created_at", step.created_at + timedelta(
            microseconds=data.draw(st.integers(1, 10**9)) * data.draw(st.sampled_from([-1, 1]))
        )
    if name in ("prev_hash", "hash"):
        current = getattr(step, name)
        forged = data.draw(st.text("0123456789abcdef", min_size=64, max_size=64))
        return name, forged if forged != current else "f" * 63 + "0"
    return name, getattr(step, name) + data.draw(st.integers(1, 1000))


def found_after(run: Run, step: Step, column: str, value) -> tuple[bool, int | None]:
    """verify_chain of `run` with one column of one step changed; rolled back after."""
    with transaction.atomic():
        tamper(f"UPDATE runs_step SET {column} = %s WHERE id = %s", [value, step.pk])
        result = run.verify_chain()
        transaction.set_rollback(True)
    return result


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_a_change_to_any_hashed_field_of_any_step_is_found(finished, data):
    run, other = finished
    steps = list(run.steps.order_by("seq"))
    step = data.draw(st.sampled_from(steps), label="step")
    name = data.draw(st.sampled_from(HASHED), label="field")
    column, value = new_value(step, name, other, data)
    ok, bad = found_after(run, step, column, value)
    assert not ok
    if name in ("run", "seq"):
        # Moved to another run or place: the timeline has a gap where it was, found at the
        # first seq read that is not the expected one.
        assert bad is not None and bad >= step.seq
    else:
        assert bad == step.seq  # its own hash no longer matches
    assert run.verify_chain() == (True, None)  # rolled back


@pytest.mark.xfail(
    strict=True,
    reason="tokens and latency are not part of Step.compute_hash: a change to them goes "
    "unnoticed (reported, not fixed here: hashing them invalidates every stored chain)",
)
def test_a_change_to_a_steps_token_counts_or_latency_is_found(finished):
    run, _ = finished
    step = run.steps.get(seq=2)  # the first model call: it has tokens and a latency
    for column in UNHASHED:
        ok, bad = found_after(run, step, column, getattr(step, column) + 7)
        assert (ok, bad) == (False, step.seq), column
