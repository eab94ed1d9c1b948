"""Whole runs' timelines moved out of the database into archive files (JSON Lines + zstd),
verified from the file alone, and back. Archiving verifies the file before it removes rows;
restoring puts the same rows back. Why and how: docs/design/modules.md.
"""

import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import IO, Any
from uuid import UUID

import zstandard
from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils.dateparse import parse_datetime

from agentkit.database import in_batches

from ..models import ArchivedRun, Checkpoint, Run, Step
from . import partitions

FORMAT = 1
APPEND_ONLY_TRIGGER = "runs_step_append_only"
SPEND_TRIGGER = "runs_step_adds_spend"


class ArchiveError(ValueError):
    """Why a file cannot be archived to, verified or restored from, in words."""


@dataclass
class ArchivedRunInFile:
    id: UUID
    created_at: datetime
    last_seq: int
    chain_head: str
    steps: list[Step] = field(default_factory=list)
    checkpoints: list[Checkpoint] = field(default_factory=list)


@dataclass
class Verification:
    runs: list[ArchivedRunInFile]
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def _dumps(record: dict) -> bytes:
    return (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def _step_record(step: Step) -> dict:
    return {
        "id": step.pk,
        "seq": step.seq,
        "kind": step.kind,
        "data": step.data,
        "cost_usd": str(step.cost_usd),
        "tokens_in": step.tokens_in,
        "tokens_out": step.tokens_out,
        "latency_ms": step.latency_ms,
        "created_at": step.created_at.isoformat(),
        "prev_hash": step.prev_hash,
        "hash": step.hash,
    }


def _write_run(out: IO[bytes], run: Run) -> tuple[int, int]:
    out.write(
        _dumps(
            {
                "run": {
                    "id": str(run.pk),
                    "agent": run.agent,
                    "created_at": run.created_at.isoformat(),
                    "last_seq": run.last_seq,
                    "chain_head": run.last_hash,
                }
            }
        )
    )
    steps = checkpoints = 0
    for step in in_batches(Step.objects.filter(run=run), by=("seq",)):
        out.write(_dumps({"step": _step_record(step)}))
        steps += 1
    rows = Checkpoint.objects.filter(run=run).values("id", "seq", "state", "created_at")
    for row in in_batches(rows, by=("seq",)):
        row["created_at"] = row["created_at"].isoformat()
        out.write(_dumps({"checkpoint": row}))
        checkpoints += 1
    return steps, checkpoints


def write(runs: list[Run], path: Path) -> dict[UUID, tuple[int, int]]:
    """The runs' timelines into `path` (written aside, then renamed into place); each run's
    (steps, checkpoints) written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    counts = {}
    with open(partial, "wb") as raw:
        with zstandard.ZstdCompressor(level=6).stream_writer(raw, closefd=False) as out:
            out.write(_dumps({"archive": {"format": FORMAT, "runs": len(runs)}}))
            for run in runs:
                counts[run.pk] = _write_run(out, run)
        raw.flush()
        os.fsync(raw.fileno())
    os.replace(partial, path)
    return counts


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _lines(path: Path) -> Iterator[dict]:
    with open(path, "rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as reader:
        buffered = b""
        while chunk := reader.read(1 << 20):
            buffered += chunk
            *whole, buffered = buffered.split(b"\n")
            for line in whole:
                if line.strip():
                    yield json.loads(line)
        if buffered.strip():
            yield json.loads(buffered)


def _when(value: Any) -> datetime:
    parsed = parse_datetime(str(value))
    if parsed is None:
        raise ValueError(f"not a date and time: {value!r}")
    return parsed


def read(path: Path) -> list[ArchivedRunInFile]:
    """The runs of an archive file, as unsaved rows."""
    runs: list[ArchivedRunInFile] = []
    try:
        lines = _lines(path)
        header = next(lines, None)
        if not isinstance(header, dict) or header.get("archive", {}).get("format") != FORMAT:
            raise ArchiveError(f"{path} is not a timeline archive (format {FORMAT})")
        for record in lines:
            if "run" in record:
                r = record["run"]
                runs.append(
                    ArchivedRunInFile(
                        id=UUID(r["id"]),
                        created_at=_when(r["created_at"]),
                        last_seq=int(r["last_seq"]),
                        chain_head=str(r["chain_head"]),
                    )
                )
            elif not runs:
                raise ArchiveError("a step or checkpoint before any run")
            elif "step" in record:
                s, run = record["step"], runs[-1]
                runs[-1].steps.append(
                    Step(
                        id=int(s["id"]),
                        run_id=run.id,
                        run_created=run.created_at,
                        seq=int(s["seq"]),
                        kind=str(s["kind"]),
                        data=s["data"],
                        cost_usd=Decimal(str(s["cost_usd"])),
                        tokens_in=int(s["tokens_in"]),
                        tokens_out=int(s["tokens_out"]),
                        latency_ms=int(s["latency_ms"]),
                        created_at=_when(s["created_at"]),
                        prev_hash=str(s["prev_hash"]),
                        hash=str(s["hash"]),
                    )
                )
            elif "checkpoint" in record:
                c, run = record["checkpoint"], runs[-1]
                run.checkpoints.append(
                    Checkpoint(
                        id=int(c["id"]),
                        run_id=run.id,
                        run_created=run.created_at,
                        seq=int(c["seq"]),
                        state=c["state"],
                        created_at=_when(c["created_at"]),
                    )
                )
    except zstandard.ZstdError as exc:
        raise ArchiveError(f"{path} is not a readable zstd file: {exc}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        if isinstance(exc, ArchiveError):
            raise
        raise ArchiveError(
            f"{path} is not a timeline archive: {type(exc).__name__}: {exc}"
        ) from None
    return runs


def _chain_problem(run: ArchivedRunInFile) -> str | None:
    prev = ""
    for expected, step in enumerate(run.steps, start=1):
        if step.seq != expected:
            return f"run {run.id}: step #{expected} is missing (found #{step.seq})"
        if step.prev_hash != prev:
            return f"run {run.id}: step #{step.seq} is not chained to the step before it"
        if step.compute_hash() != step.hash:
            return f"run {run.id}: step #{step.seq} was changed (its hash is not its content's)"
        prev = step.hash
    if len(run.steps) != run.last_seq or prev != run.chain_head:
        return f"run {run.id}: the chain does not end on its head ({len(run.steps)} steps)"
    return None


def verify(path: Path) -> Verification:
    """Recompute every run's chain from the file; where the database records the run as
    archived in this file, its chain head and the file's SHA-256 must be the recorded ones."""
    try:
        runs = read(path)
    except (ArchiveError, OSError) as exc:
        return Verification(runs=[], problems=[str(exc)])
    problems = [p for p in map(_chain_problem, runs) if p]
    records = ArchivedRun.objects.in_bulk([r.id for r in runs])
    digest = sha256(path) if records else ""
    for run in runs:
        record = records.get(run.id)
        if record is None:
            continue
        if record.chain_head != run.chain_head:
            problems.append(f"run {run.id}: the database recorded another chain head")
        if record.archive_sha256 != digest:
            problems.append(f"run {run.id}: the file is not the one archived (SHA-256 differs)")
    return Verification(runs=runs, problems=problems)


def _no_checks_pending(cursor) -> None:
    """Postgres refuses to ALTER a table with deferred checks pending on it (foreign keys of
    rows this transaction wrote, restored ones among them): made now."""
    cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")


@contextmanager
def _triggers_off(table: str, names: tuple[str, ...]) -> Iterator[None]:
    """The triggers off on `table` until the block ends, inside the caller's transaction:
    no other session ever sees them off (Postgres: ALTER TABLE holds the table's lock until
    commit; SQLite: DDL is transactional)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            _no_checks_pending(cursor)
            for n in names:
                cursor.execute(f'ALTER TABLE "{table}" DISABLE TRIGGER "{n}"')
            yield
            for n in names:
                cursor.execute(f'ALTER TABLE "{table}" ENABLE TRIGGER "{n}"')
            return
        cursor.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = %s",
            [table],
        )
        found = [(n, s) for n, s in cursor.fetchall() if n in names]
        for n, _ in found:
            cursor.execute(f'DROP TRIGGER "{n}"')
        yield
        for _, made in found:
            cursor.execute(made)


def _partition_of(table: str, month: date) -> str:
    if not partitions.partitioned():
        return table
    if partitions.exists(table, month):
        return partitions.name(table, month)
    return f"{table}_default"


def _remove(runs: list[Run]) -> None:
    """The runs' steps and checkpoints out of the database (in the caller's transaction)."""
    if not partitions.partitioned():
        ids = [r.pk for r in runs]
        for model in (Step, Checkpoint):
            # Not the ORM's delete: it would cascade to post-hoc reviews of the steps.
            rows: QuerySet = model.objects.filter(run_id__in=ids)
            sql, params = rows.values("id").query.sql_with_params()
            with connection.cursor() as cursor:
                table = model._meta.db_table
                cursor.execute(f"DELETE FROM {table} WHERE id IN ({sql})", params)
        return
    by_month: dict[date, list[UUID]] = {}
    for run in runs:
        by_month.setdefault(partitions.month_of(run.created_at), []).append(run.pk)
    with connection.cursor() as cursor:
        for month, ids in by_month.items():
            for table in partitions.TABLES:
                part = _partition_of(table, month)
                cursor.execute(
                    f'SELECT EXISTS (SELECT 1 FROM "{part}" WHERE run_id <> ALL(%s))', [ids]
                )
                others = cursor.fetchone()[0]
                if not others and not part.endswith("_default"):
                    # The whole month goes: no row is deleted, the partition is dropped.
                    _no_checks_pending(cursor)
                    cursor.execute(f'ALTER TABLE "{table}" DETACH PARTITION "{part}"')
                    cursor.execute(f'DROP TABLE "{part}"')
                    continue
                names = (APPEND_ONLY_TRIGGER,) if table == "runs_step" else ()
                with _triggers_off(part, names):
                    cursor.execute(f'DELETE FROM "{part}" WHERE run_id = ANY(%s)', [ids])


@dataclass
class Archived:
    path: Path
    runs: int
    steps: int
    checkpoints: int


def archive(runs: list[Run], path: Path) -> Archived:
    """The runs' timelines into the file at `path`, verified, then out of the database."""
    counts = write(runs, path)
    check = verify(path)
    if not check.ok:
        raise ArchiveError(f"{path} does not verify; nothing removed: {check.problems[0]}")
    digest = sha256(path)
    with transaction.atomic():
        _remove(runs)
        ArchivedRun.objects.bulk_create(
            [
                ArchivedRun(
                    run=run,
                    archive=str(path),
                    archive_sha256=digest,
                    chain_head=run.last_hash,
                    steps=counts[run.pk][0],
                    checkpoints=counts[run.pk][1],
                )
                for run in runs
            ]
        )
    return Archived(
        path=path,
        runs=len(runs),
        steps=sum(s for s, _ in counts.values()),
        checkpoints=sum(c for _, c in counts.values()),
    )


def restore(path: Path, *, run_ids: set[UUID] | None = None) -> list[UUID]:
    """The runs archived in `path` (or those of `run_ids`) back into the database; refuses a
    file that does not verify. Runs not recorded as archived in this file are left alone."""
    check = verify(path)
    if not check.ok:
        raise ArchiveError(f"{path} does not verify: {check.problems[0]}")
    wanted = [r for r in check.runs if run_ids is None or r.id in run_ids]
    records = ArchivedRun.objects.in_bulk([r.id for r in wanted])
    restored = []
    with transaction.atomic():
        for run in wanted:
            if run.id not in records:
                continue
            month = partitions.month_of(run.created_at)
            partitions.ensure(month)
            with _triggers_off(_partition_of("runs_step", month), (SPEND_TRIGGER,)):
                Step.objects.bulk_create(run.steps, batch_size=1000)
            Checkpoint.objects.bulk_create(run.checkpoints, batch_size=1000)
            restored.append(run.id)
        ArchivedRun.objects.filter(run__in=restored).delete()
    return restored
