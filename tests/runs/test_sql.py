"""runs/sql.py: hand-built statements must store what the ORM would, on either database."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from runs import sql
from runs.models import Checkpoint, Run

from .ui_factories import make_run

pytestmark = pytest.mark.django_db


def test_update_writes_typed_values_only_where_everything_matches(operator, no_enqueue):
    run = make_run(operator, status=Run.Status.RUNNING)
    until = timezone.now() + timedelta(seconds=90)
    values = {"cost_usd": Decimal("1.234567"), "lease_expires_at": until, "step_count": 7}
    assert sql.update(Run, values, {"id": run.pk, "status": Run.Status.QUEUED}) == 0
    run.refresh_from_db()
    assert run.step_count == 0
    assert sql.update(Run, values, {"id": run.pk, "status": Run.Status.RUNNING}) == 1
    run.refresh_from_db()
    assert (run.cost_usd, run.lease_expires_at, run.step_count) == (
        Decimal("1.234567"),
        until,
        7,
    )


def test_insert_upserts_on_conflict_and_sets_the_new_id(operator, no_enqueue):
    run = make_run(operator)
    columns = ("run", "seq", "state", "created_at")
    first = Checkpoint(run=run, seq=40, state={"pending": [], "n": "ü"})
    sql.insert(first, columns, conflict=("run", "seq"), update_names=("state",))
    assert first.pk is not None and not first._state.adding
    again = Checkpoint(run=run, seq=40, state={"pending": [1]})
    sql.insert(again, columns, conflict=("run", "seq"), update_names=("state",))
    stored = Checkpoint.objects.get(run=run, seq=40)
    assert stored.pk == first.pk
    assert stored.state == {"pending": [1]}
