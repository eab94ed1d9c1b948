"""runs/sql.py: hand-built statements must store what the ORM would, on either database."""

import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from runs import sql
from runs.models import (
    CHECKPOINT_COLUMNS,
    RUN_COLUMNS,
    STEP_COLUMNS,
    Checkpoint,
    Run,
    SideEffect,
    Step,
    checkpoint_conflict,
)

from .factories import add_steps, make_run

pytestmark = pytest.mark.django_db


def test_update_writes_typed_values_only_where_everything_matches(operator, no_enqueue):
    run = make_run(operator, status=Run.Status.RUNNING)
    until = timezone.now() + timedelta(seconds=90)
    values = {"cost_usd": Decimal("1.234567"), "lease_expires_at": until, "step_count": 7}
    assert sql.update(Run, values, {"id": run.pk, "status": Run.Status.QUEUED}) == 0
    run.refresh_from_db()
    assert run.step_count == 0
    # None in the WHERE matches NULL (a claim compares the lease it read, which may be none).
    assert run.lease_expires_at is None
    assert sql.update(Run, {"step_count": 3}, {"id": run.pk, "lease_expires_at": None}) == 1
    assert sql.update(Run, {"step_count": 4}, {"id": run.pk, "lease_expires_at": until}) == 0
    assert sql.update(Run, values, {"id": run.pk, "status": Run.Status.RUNNING}) == 1
    run.refresh_from_db()
    assert (run.cost_usd, run.lease_expires_at, run.step_count) == (
        Decimal("1.234567"),
        until,
        7,
    )


def test_insert_upserts_on_conflict_and_sets_the_new_id(operator, no_enqueue):
    run = make_run(operator)
    columns = ("run", "seq", "state", "created_at", "run_created")
    first = Checkpoint(run=run, seq=40, state={"pending": [], "n": "ü"})
    sql.insert(first, columns, conflict=checkpoint_conflict(), update_names=("state",))
    assert first.pk is not None and not first._state.adding
    again = Checkpoint(run=run, seq=40, state={"pending": [1]})
    sql.insert(again, columns, conflict=checkpoint_conflict(), update_names=("state",))
    stored = Checkpoint.objects.get(run=run, seq=40)
    assert stored.pk == first.pk
    assert stored.state == {"pending": [1]}


def test_insert_without_update_names_leaves_an_existing_row_alone(operator, no_enqueue):
    run = make_run(operator)
    columns = ("run", "seq", "state", "created_at", "run_created")
    first = Checkpoint(run=run, seq=41, state={"n": 1})
    assert sql.insert(first, columns, conflict=checkpoint_conflict()) is True
    assert first.pk is not None
    again = Checkpoint(run=run, seq=41, state={"n": 2})
    assert sql.insert(again, columns, conflict=checkpoint_conflict()) is False
    assert again.pk is None and again._state.adding  # not saved: the caller reads the row
    assert Checkpoint.objects.get(run=run, seq=41).state == {"n": 1}


def _step_and_checkpoint(run: Run, seq: int) -> list:
    step = Step(
        run=run,
        seq=seq,
        kind=Step.Kind.TOOL,
        data={"tool": "t", "result": {"ü": [1, 2]}},
        cost_usd=Decimal("0.000123"),
        created_at=timezone.now(),
        prev_hash=run.last_hash,
        hash="h" * 64,
    )
    checkpoint = Checkpoint(run=run, seq=seq, state={"pending": []})
    return [
        (step, STEP_COLUMNS, (), ()),
        (checkpoint, CHECKPOINT_COLUMNS, checkpoint_conflict(), ("state",)),
    ]


def test_update_then_insert_writes_nothing_unless_the_update_matches(operator, no_enqueue):
    run = make_run(operator, status=Run.Status.RUNNING)
    seq = run.last_seq + 1
    inserts = _step_and_checkpoint(run, seq)
    where = {"id": run.pk, "last_seq": run.last_seq + 5}
    assert not sql.update_then_insert(Run, {"last_seq": seq}, where, inserts)
    assert not run.steps.filter(seq=seq).exists()
    assert not run.checkpoints.filter(seq=seq).exists()
    run.refresh_from_db()
    assert run.last_seq == seq - 1


def test_update_then_insert_writes_all_and_sets_the_new_ids(operator, no_enqueue):
    run = make_run(operator, status=Run.Status.RUNNING)
    seq = run.last_seq + 1
    inserts = _step_and_checkpoint(run, seq)
    where = {"id": run.pk, "last_seq": run.last_seq}
    values = {"last_seq": seq, "cost_usd": Decimal("2.5")}
    assert sql.update_then_insert(Run, values, where, inserts)
    (step, *_), (checkpoint, *_) = inserts
    stored = Step.objects.get(run=run, seq=seq)
    assert stored.pk == step.pk and not step._state.adding
    assert (stored.data, stored.cost_usd) == ({"tool": "t", "result": {"ü": [1, 2]}}, step.cost_usd)
    assert Checkpoint.objects.get(run=run, seq=seq).pk == checkpoint.pk
    run.refresh_from_db()
    assert (run.last_seq, run.cost_usd) == (seq, Decimal("2.5"))
    # The checkpoint half is an upsert: the same (run, seq) again replaces the state.
    again = Checkpoint(run=run, seq=seq, state={"pending": [{"id": "x"}]})
    where = {"id": run.pk, "last_seq": seq}
    upsert = [(again, CHECKPOINT_COLUMNS, checkpoint_conflict(), ("state",))]
    assert sql.update_then_insert(Run, {"last_seq": seq}, where, upsert)
    assert again.pk == checkpoint.pk
    assert Checkpoint.objects.get(pk=checkpoint.pk).state == {"pending": [{"id": "x"}]}


def test_update_then_insert_updates_other_rows_only_with_the_main_update(operator, no_enqueue):
    run = make_run(operator, status=Run.Status.RUNNING)
    effect = SideEffect.objects.create(key="k" * 64, run=run, step_seq=1, tool="t", args={})
    outcome = {"status": SideEffect.Status.COMMITTED, "result": {"result": {"ü": 1}}}
    also = [(SideEffect, outcome, {"id": effect.pk})]
    seq = run.last_seq + 1
    stale = {"id": run.pk, "last_seq": run.last_seq + 5}
    assert not sql.update_then_insert(Run, {"last_seq": seq}, stale, [], also)
    effect.refresh_from_db()
    assert (effect.status, effect.result) == (SideEffect.Status.INTENT, None)

    inserts = _step_and_checkpoint(run, seq)
    where = {"id": run.pk, "last_seq": run.last_seq}
    assert sql.update_then_insert(Run, {"last_seq": seq}, where, inserts, also)
    effect.refresh_from_db()
    assert (effect.status, effect.result) == (SideEffect.Status.COMMITTED, {"result": {"ü": 1}})
    assert run.steps.filter(seq=seq).exists()


def test_get_loads_a_run_as_the_orm_does(operator, no_enqueue):
    run = make_run(operator, status=Run.Status.RUNNING, cost_usd=Decimal("0.123456"))
    loaded = sql.get(Run, run.pk)
    expected = Run.objects.get(pk=run.pk)
    for field in Run._meta.concrete_fields:
        assert getattr(loaded, field.attname) == getattr(expected, field.attname), field.name
    assert loaded.agent_config["slug"] == "sql-analyst" and not loaded._state.adding
    assert sql.get(Run, uuid.uuid4()) is None


def test_select_filters_orders_and_limits(operator, no_enqueue):
    run = make_run(operator)
    add_steps(run, 4)
    rows = sql.select(
        Step,
        ("seq", "kind", "data"),
        {"run": run.pk, "kind": ("llm", "status")},
        order_by=("-seq",),
    )
    expected = list(
        run.steps.filter(kind__in=["llm", "status"])
        .order_by("-seq")
        .values_list("seq", "kind", "data")
    )
    assert rows == expected and len(rows) >= 3
    assert sql.select(Step, ("seq",), {"run": run.pk}, order_by=("seq",), limit=2) == [(1,), (2,)]
    assert sql.select(Step, ("seq",), {"run": run.pk, "kind": ("gate",)}) == []


def test_insert_all_is_all_or_nothing(operator, no_enqueue):
    template = make_run(operator)
    run = Run(**{f.attname: getattr(template, f.attname) for f in Run._meta.concrete_fields})
    run.pk = uuid.uuid4()
    bad = Step(run=run, seq=0, kind=Step.Kind.STATUS, data={}, hash="h" * 64)  # seq must be >= 1
    with pytest.raises(IntegrityError), transaction.atomic():
        sql.insert_all([(run, RUN_COLUMNS, (), ()), (bad, STEP_COLUMNS, (), ())])
    assert not Run.objects.filter(pk=run.pk).exists()
    good = Step(run=run, seq=1, kind=Step.Kind.STATUS, data={"ü": 1}, hash="h" * 64)
    sql.insert_all([(run, RUN_COLUMNS, (), ()), (good, STEP_COLUMNS, (), ())])
    assert Step.objects.get(run_id=run.pk, seq=1).data == {"ü": 1} and good.pk is not None
