"""The audit trail cannot be rewritten: Postgres refuses it, and the hash chain finds it.

Each branch of Run.verify_chain has a test here that fails when that branch is broken. On
Postgres the tampering itself has to get past the database first (a superuser turning the
triggers off for its session), which is the point of the first tests.
"""

import pytest
from django.db import connection, transaction
from django.db.utils import DatabaseError
from django.utils import timezone

from agentkit.llm.scripted import text, tool_use
from runs.models import Run, Step, canonical_json

from ..conftest import on_postgres
from .harness import drive, tamper

pytestmark = pytest.mark.django_db(transaction=True)


def finished_run(launch, script) -> Run:
    script([[tool_use("t_echo", text="a")], [tool_use("t_echo", text="b")], [text("done")]])
    run = launch()
    drive(run)
    assert run.status == Run.Status.SUCCEEDED
    assert run.verify_chain() == (True, None)
    return run


# --- the database refuses ------------------------------------------------------------------
@on_postgres
def test_postgres_refuses_to_update_or_delete_a_step(launch, script):
    run = finished_run(launch, script)
    step = run.steps.get(seq=2)
    for rewrite in (
        lambda: Step.objects.filter(pk=step.pk).update(data={"forged": True}),
        lambda: Step.objects.filter(pk=step.pk).delete(),
    ):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            rewrite()
    assert run.steps.get(seq=2).data == step.data
    assert run.verify_chain() == (True, None)


# --- the chain finds it ------------------------------------------------------------------------
def test_an_edited_step_breaks_the_chain_at_that_step(launch, script):
    run = finished_run(launch, script)
    tamper("UPDATE runs_step SET data = %s WHERE run_id = %s AND seq = 3", ['{"x": 1}', run.pk.hex])
    assert run.verify_chain() == (False, 3)


def test_a_wrong_prev_hash_breaks_the_chain_even_with_a_recomputed_hash(launch, script):
    run = finished_run(launch, script)
    step = run.steps.get(seq=4)
    step.prev_hash = "0" * 64
    forged_hash = step.compute_hash()  # self-consistent: only the link is wrong
    tamper(
        "UPDATE runs_step SET prev_hash = %s, hash = %s WHERE id = %s",
        [step.prev_hash, forged_hash, step.pk],
    )
    assert run.verify_chain() == (False, 4)


def test_a_gap_in_seq_breaks_the_chain_even_with_every_hash_recomputed(launch, script):
    """A forger who deletes a step and re-links the rest (each hash and prev_hash redone, the
    run's head moved) leaves one trace: the missing number."""
    run = finished_run(launch, script)
    tamper("DELETE FROM runs_step WHERE run_id = %s AND seq = 3", [run.pk.hex])
    prev = run.steps.get(seq=2).hash
    for step in run.steps.filter(seq__gt=3).order_by("seq"):
        step.prev_hash = prev
        step.hash = prev = step.compute_hash()
        tamper(
            "UPDATE runs_step SET prev_hash = %s, hash = %s WHERE id = %s",
            [step.prev_hash, step.hash, step.pk],
        )
    tamper("UPDATE runs_run SET last_hash = %s WHERE id = %s", [prev, run.pk.hex])
    run.refresh_from_db()
    assert run.verify_chain() == (False, 4)


def test_reordered_steps_break_the_chain(launch, script):
    run = finished_run(launch, script)
    last = run.last_seq
    # Swap two steps' places (through a free seq: (run, seq) is unique).
    for old, new in ((2, 10_000), (3, 2), (10_000, 3)):
        tamper(
            "UPDATE runs_step SET seq = %s WHERE run_id = %s AND seq = %s", [new, run.pk.hex, old]
        )
    ok, bad = run.verify_chain()
    assert not ok and bad == 2
    assert run.last_seq == last


def test_a_deleted_last_step_breaks_the_chain_at_its_place(launch, script):
    run = finished_run(launch, script)
    last = run.last_seq
    tamper("DELETE FROM runs_step WHERE run_id = %s AND seq = %s", [run.pk.hex, last])
    # Every remaining link is sound; only the run's head says a step is missing.
    assert run.verify_chain() == (False, last)


@on_postgres
def test_postgres_refuses_to_truncate_the_timeline(launch, script):
    run = finished_run(launch, script)
    # Without CASCADE the foreign keys refuse it already; with it, the trigger does.
    for statement in ("TRUNCATE runs_step CASCADE", "TRUNCATE runs_run CASCADE"):
        with (
            pytest.raises(DatabaseError, match="append-only"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(statement)
    assert run.steps.count() == run.last_seq
    assert run.verify_chain() == (True, None)


@on_postgres
def test_postgres_refuses_to_truncate_the_decisions():
    for table in ("approvals_approval", "approvals_approvalvote"):
        with (
            pytest.raises(DatabaseError, match="append-only"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(f"TRUNCATE {table} CASCADE")


def test_a_removed_whole_timeline_breaks_the_chain(launch, script):
    """The run row keeps the chain's head (last_seq, last_hash): an empty timeline is not an
    intact one."""
    run = finished_run(launch, script)
    tamper("DELETE FROM runs_step WHERE run_id = %s", [run.pk.hex])
    assert run.verify_chain() == (False, 1)


def test_a_removed_tail_breaks_the_chain(launch, script):
    run = finished_run(launch, script)
    tamper("DELETE FROM runs_step WHERE run_id = %s AND seq > 2", [run.pk.hex])
    assert run.verify_chain() == (False, 3)


# --- a step's JSON, encoded once for its hash and its row ----------------------------------
DATA = {
    "z": [1, 2.5, 1e-7, 10**20, None, True],
    "ü": {"b": 'naïve ✓ \\ "q"', "a": {"nested": []}},
    "text": "line\nbreak\ttab",
}


def _stored_text(step: Step) -> str:
    column = "data::text" if connection.vendor == "postgresql" else "data"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {column} FROM runs_step WHERE id = %s", [step.pk])
        return cursor.fetchone()[0]


def test_a_steps_one_encoding_is_hashed_and_stored_as_django_would_store_it(launch, script):
    run, other = finished_run(launch, script), finished_run(launch, script)
    with transaction.atomic():
        step = run.append_step(Step.Kind.TOOL, DATA)
    assert step.json_text == {"data": canonical_json(DATA)}
    # The hash is the one the whole body's canonical JSON gives, and the chain holds.
    assert step.hash == step.compute_hash()
    assert run.verify_chain() == (True, None)
    # The row holds what the ORM's own insert would have written, byte for byte.
    orms = Step(
        run=other, seq=other.last_seq + 1, kind=Step.Kind.TOOL, data=DATA, prev_hash="", hash=""
    )
    orms.save()
    assert _stored_text(step) == _stored_text(orms)
    assert Step.objects.get(pk=step.pk).data == DATA


def test_a_step_that_is_not_plain_json_is_hashed_as_before(launch, script):
    run = finished_run(launch, script)
    step = run._next_step(Step.Kind.TOOL, {"at": timezone.now()}, {})
    assert not hasattr(step, "json_text")  # the ORM's adaptation decides, as before
    assert step.hash == step.compute_hash()


def test_floats_the_database_spells_otherwise_keep_the_chain_sound(launch, script):
    """jsonb gives -0.0 back as 0.0 and 1e+16 as 10000000000000000: the hash is made from
    the spelling that is read back, so the chain still verifies (it used to break on
    Postgres)."""
    run = launch()
    data = {"a": -0.0, "b": 1e16, "c": 1.5e-7, "d": [2.5e20, 0.25], "note": "1e+16 -0.0 stay text"}
    with transaction.atomic():
        step = Run.locked(run.pk).append_step(Step.Kind.TOOL, data)
    stored = Step.objects.get(pk=step.pk)
    assert stored.data["note"] == "1e+16 -0.0 stay text"
    run.refresh_from_db()
    assert run.verify_chain() == (True, None)
    assert canonical_json({"x": 1e16}) == canonical_json({"x": 10**16}) == '{"x":10000000000000000}'
    assert canonical_json({"x": -0.0}) == '{"x":0.0}'
    assert canonical_json({"x": 0.25, "y": "e+"}) == '{"x":0.25,"y":"e+"}'
