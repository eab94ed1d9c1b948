"""The timeline over years (runs/retention/): monthly partitions on Postgres, made ahead and
holding the audit trail's triggers; retention per agent or team; whole runs archived to a
file that verifies, and restored from it."""

import json
from datetime import timedelta
from pathlib import Path

import pytest
import zstandard
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.db.utils import DatabaseError
from django.urls import reverse
from django.utils import timezone

from accounts.models import Team, TeamAgent
from runs import tasks
from runs.models import AgentDaySpend, ArchivedRun, Checkpoint, Retention, Run, Step
from runs.retention import archive, partitions, policy

from ..conftest import on_postgres
from .factories import add_steps, make_run
from .harness import CLOCK

pytestmark = pytest.mark.django_db


def finished(user, *, days_ago: int = 0, agent: str = "sql-analyst", steps: int = 4) -> Run:
    CLOCK.skew = -timedelta(days=days_ago)
    try:
        run = make_run(user, agent=agent, status=Run.Status.RUNNING)
        add_steps(run, steps)
        Run.objects.filter(pk=run.pk).update(
            status=Run.Status.SUCCEEDED, termination_reason="completed"
        )
    finally:
        CLOCK.skew = timedelta(0)
    run.refresh_from_db()
    return run


def partition_of(run: Run, table: str = "runs_step") -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT DISTINCT tableoid::regclass::text FROM {table} WHERE run_id = %s", [run.pk]
        )
        return {row[0] for row in cursor.fetchall()}


def rewrite(path: Path, change) -> None:
    """The archive file with its lines passed through `change` (record -> record)."""
    text = zstandard.ZstdDecompressor().stream_reader(path.read_bytes()).read().decode()
    lines = [json.dumps(change(json.loads(line))) for line in text.splitlines()]
    path.write_bytes(zstandard.ZstdCompressor().compress(("\n".join(lines) + "\n").encode()))


# --- partitions (Postgres) -----------------------------------------------------------------
@on_postgres
def test_the_periodic_task_makes_partitions_ahead_with_the_truncate_trigger(settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "TIMELINE_PARTITIONS_AHEAD": 14}
    assert tasks.make_timeline_partitions() == 15
    month = partitions.month_of(timezone.now())
    last = partitions._add_months(month, 14)
    with connection.cursor() as cursor:
        for table in partitions.TABLES:
            name = partitions.name(table, last)
            cursor.execute(
                "SELECT count(*) FROM pg_trigger WHERE tgrelid = %s::regclass AND tgname = %s",
                [name, f"{name}_no_truncate"],
            )
            assert cursor.fetchone()[0] == 1, name
    assert partitions.exists("runs_step", last)
    # Again: nothing new, no error.
    assert tasks.make_timeline_partitions() == 15


@on_postgres
def test_a_run_from_last_month_keeps_its_whole_timeline_in_that_months_partition(operator):
    last_month = partitions.month_of(timezone.now() - timedelta(days=40))
    partitions.ensure(last_month)
    run = finished(operator, days_ago=40)
    assert run.created_at < timezone.now() - timedelta(days=39)
    # A step appended today still goes where its run's timeline is.
    add_steps(run, 1)
    run.refresh_from_db()
    assert partition_of(run) == {partitions.name("runs_step", last_month)}
    assert partition_of(run, "runs_checkpoint") == {partitions.name("runs_checkpoint", last_month)}
    assert run.steps.count() == run.last_seq == 6
    assert run.verify_chain() == (True, None)


@on_postgres
def test_a_run_of_a_month_without_a_partition_lands_in_the_default_one(operator):
    run = finished(operator, days_ago=3 * 365)
    assert partition_of(run) == {"runs_step_default"}


@on_postgres
def test_a_partition_refuses_update_delete_and_truncate(operator):
    run = finished(operator)
    (part,) = partition_of(run)
    with connection.cursor() as cursor:
        # The foreign keys' checks of the rows just written, done now: a table with checks
        # pending refuses TRUNCATE for that reason, before its trigger has a say.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    for statement in (
        f"UPDATE {part} SET data = '{{}}'",
        f"DELETE FROM {part}",
        f"TRUNCATE {part}",
        "TRUNCATE runs_step_default",
        f"TRUNCATE {partitions.name('runs_checkpoint', partitions.month_of(run.created_at))}",
    ):
        with (
            pytest.raises(DatabaseError, match="append-only"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(statement)
    assert run.steps.count() == run.last_seq


# --- retention -------------------------------------------------------------------------------
def test_an_agents_policy_then_its_teams_longest_then_the_setting_decides(operator, settings):
    old = finished(operator, days_ago=40)
    other = finished(operator, days_ago=40, agent="refund-desk")
    young = finished(operator, days_ago=5)
    running = make_run(operator, status=Run.Status.RUNNING)
    now = timezone.now()
    assert not policy.due(now=now).exists()  # TIMELINE_RETENTION_DAYS is 0: kept for ever

    settings.AGENTOPS = {**settings.AGENTOPS, "TIMELINE_RETENTION_DAYS": 30}
    assert set(policy.due(now=now)) == {old, other}

    team = Team.objects.create(name="ops", slug="ops")
    TeamAgent.objects.create(team=team, agent="refund-desk")
    Retention.objects.create(team=team, keep_days=90)
    Retention.objects.create(team=Team.objects.create(name="b", slug="b"), keep_days=10)
    TeamAgent.objects.create(team=Team.objects.get(name="b"), agent="refund-desk")
    assert policy.keep_days("refund-desk") == 90  # the longest of its teams'
    Retention.objects.create(agent="sql-analyst", keep_days=3)
    assert set(policy.due(now=now)) == {old, young}
    assert running not in policy.due(now=now, older_than_days=0)


# --- archive and restore ---------------------------------------------------------------------
def test_archive_removes_the_rows_and_the_file_verifies(operator, tmp_path):
    run, kept = finished(operator, days_ago=40), finished(operator, days_ago=40)
    steps, checkpoints = run.last_seq, run.checkpoints.count()
    done = archive.archive([run], tmp_path / "a.jsonl.zst")
    assert (done.runs, done.steps, done.checkpoints) == (1, steps, checkpoints)
    assert not Step.objects.filter(run=run).exists()
    assert not Checkpoint.objects.filter(run=run).exists()
    assert kept.steps.count() == kept.last_seq and kept.verify_chain() == (True, None)
    record = ArchivedRun.objects.get(run=run)
    assert record.chain_head == run.last_hash and record.steps == steps
    check = archive.verify(tmp_path / "a.jsonl.zst")
    assert check.ok, check.problems
    assert [r.id for r in check.runs] == [run.pk]
    assert check.runs[0].steps[-1].hash == run.last_hash


def test_restore_brings_the_timeline_back_to_the_run_page(client, operator, tmp_path):
    run = finished(operator, days_ago=40)
    before = list(run.steps.order_by("seq").values_list("id", "hash"))
    spend = list(AgentDaySpend.objects.values_list("calls", "cost_usd"))
    path = tmp_path / "a.jsonl.zst"
    archive.archive([run], path)
    client.force_login(operator)
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert "timeline lives in an archive" in page and str(path) in page

    assert archive.restore(path) == [run.pk]
    assert list(run.steps.order_by("seq").values_list("id", "hash")) == before
    assert run.verify_chain() == (True, None)
    assert not ArchivedRun.objects.filter(run=run).exists()
    # The steps' spend was counted when they were first written, not again now.
    assert list(AgentDaySpend.objects.values_list("calls", "cost_usd")) == spend
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert "timeline lives in an archive" not in page
    assert f'id="step-{run.pk}-{run.last_seq}"' in page or "thinking 2" in page


def test_the_audit_view_says_the_run_lives_in_an_archive(client, operator, tmp_path):
    run = finished(operator, days_ago=40)
    archive.archive([run], tmp_path / "a.jsonl.zst")
    client.force_login(operator)
    response = client.get(reverse("runs:audit_run", args=[run.pk]))
    assert response.status_code == 200
    page = response.content.decode()
    assert "timeline lives in an archive" in page
    assert "does not verify" not in page
    assert run.last_hash[:10] in page


def test_a_tampered_archive_fails_verification_and_is_not_restored(operator, tmp_path):
    run = finished(operator, days_ago=40)
    path = tmp_path / "a.jsonl.zst"
    archive.archive([run], path)

    def forge(record):
        if record.get("step", {}).get("seq") == 3:
            record["step"]["data"] = {"forged": True}
        return record

    rewrite(path, forge)
    check = archive.verify(path)
    assert not check.ok
    assert any("step #3 was changed" in p for p in check.problems), check.problems
    with pytest.raises(archive.ArchiveError, match="does not verify"):
        archive.restore(path)
    assert not run.steps.exists()
    with pytest.raises(CommandError, match="does not verify"):
        call_command("archive", "--verify", str(path))


def test_a_forger_who_redoes_the_chain_is_caught_by_the_recorded_head(operator, tmp_path):
    """Every hash recomputed in the file, the run line's head moved to match: the database's
    record of the archived run still holds the real head, and the file's digest."""
    run = finished(operator, days_ago=40)
    path = tmp_path / "a.jsonl.zst"
    archive.archive([run], path)
    steps = archive.read(path)[0].steps
    steps[-1].data = {"forged": True}
    steps[-1].hash = steps[-1].compute_hash()

    def forge(record):
        if record.get("step", {}).get("seq") == steps[-1].seq:
            record["step"].update(data=steps[-1].data, hash=steps[-1].hash)
        if "run" in record:
            record["run"]["chain_head"] = steps[-1].hash
        return record

    rewrite(path, forge)
    problems = archive.verify(path).problems
    assert any("another chain head" in p for p in problems), problems
    assert any("SHA-256" in p for p in problems), problems


def test_a_checkpoint_changed_in_the_file_is_caught_by_its_digest(operator, tmp_path):
    run = finished(operator, days_ago=40)
    path = tmp_path / "a.jsonl.zst"
    archive.archive([run], path)
    rewrite(
        path, lambda r: {"checkpoint": {**r["checkpoint"], "state": {}}} if "checkpoint" in r else r
    )
    assert any("SHA-256" in p for p in archive.verify(path).problems)


def test_the_commands_archive_what_is_due_and_restore_one_run(operator, tmp_path, settings):
    a, b = finished(operator, days_ago=40), finished(operator, days_ago=40)
    young = finished(operator, days_ago=1)
    call_command("archive", "--older-than-days", "30", "--dir", str(tmp_path), "--batch", "1")
    files = sorted(tmp_path.glob("timeline-*.jsonl.zst"))
    assert len(files) == 2
    assert ArchivedRun.objects.count() == 2 and young.steps.exists()
    call_command("archive", "--verify", str(files[0]))
    record = ArchivedRun.objects.get(archive=str(files[1]))
    call_command("restore", str(files[1]), "--run", str(record.run_id))
    assert {r.run_id for r in ArchivedRun.objects.all()} == {a.pk, b.pk} - {record.run_id}
    with pytest.raises(CommandError, match="not a run id"):
        call_command("restore", str(files[0]), "--run", "nope")


@on_postgres
def test_a_month_of_archived_runs_only_is_dropped_whole(operator, tmp_path):
    month = partitions.month_of(timezone.now() - timedelta(days=70))
    partitions.ensure(month)
    first, second = finished(operator, days_ago=70), finished(operator, days_ago=70)
    archive.archive([first], tmp_path / "one.jsonl.zst")
    # Another run still lives in that month: rows deleted, partition kept.
    assert partitions.exists("runs_step", month)
    assert second.steps.count() == second.last_seq
    archive.archive([second], tmp_path / "two.jsonl.zst")
    assert not partitions.exists("runs_step", month)
    assert not partitions.exists("runs_checkpoint", month)
    # Restore makes the month's partition again.
    archive.restore(tmp_path / "one.jsonl.zst")
    assert partition_of(first) == {partitions.name("runs_step", month)}
    assert first.verify_chain() == (True, None)
