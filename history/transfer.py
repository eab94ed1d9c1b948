"""Import a run exported from another installation (the run page's Export JSON / JSONL), so a
run that failed in production can be read and replayed on a laptop.

The file is checked before anything is written: its steps must be numbered 1..n, each
chained to the one before, each hash must be its content's, and the run's head must be the
last step's hash. A changed or truncated file is refused, with the step where it breaks.
An imported run keeps its id (its steps' hashes are over it). A run that was still active
is stored as cancelled, so that no worker here ever resumes it (its tools would really run).
"""

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any
from uuid import UUID

from django.db import transaction
from django.utils.dateparse import parse_datetime

from runs.models import Checkpoint, Run, Step

# An import is read whole before it is written; an upload larger than this is refused.
MAX_IMPORT_BYTES = 50 * 1024 * 1024


class ImportRefused(ValueError):
    """Why the file cannot be imported, in words for the person importing it."""


@dataclass
class _Parsed:
    run: dict
    steps: list[dict] = field(default_factory=list)
    checkpoints: list[dict] = field(default_factory=list)


def parse(text: str) -> _Parsed:
    """The run, steps and checkpoints of an export file, JSON Lines or JSON."""
    text = text.strip()
    if not text:
        raise ImportRefused("the file is empty")
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
    if isinstance(whole, dict) and "steps" in whole:
        parsed = _Parsed(run=whole.get("run"), steps=whole["steps"])
        parsed.checkpoints = whole.get("checkpoints") or []
    else:
        parsed = _parse_lines(text.splitlines())
    if not isinstance(parsed.run, dict) or not parsed.run.get("id"):
        raise ImportRefused('the file does not start with a run record ({"run": {...}})')
    if not all(isinstance(s, dict) for s in parsed.steps + parsed.checkpoints):
        raise ImportRefused("every step and checkpoint must be an object")
    return parsed


def _parse_lines(lines: Iterable[str]) -> _Parsed:
    parsed = None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise ImportRefused(f"line {number} is not JSON: {exc}") from None
        if not isinstance(record, dict):
            raise ImportRefused(f"line {number} is not an object")
        if parsed is None:
            parsed = _Parsed(run=record.get("run"))
        elif "checkpoint" in record:
            parsed.checkpoints.append(record["checkpoint"])
        else:
            parsed.steps.append(record)
    if parsed is None:
        raise ImportRefused("the file is empty")
    return parsed


def import_run(text: str) -> Run:
    """Store the exported run in `text` (JSON Lines or JSON) here; refuses a changed file."""
    parsed = parse(text)
    try:
        run = _run(parsed.run)
        steps = [_step(run, s) for s in parsed.steps]
        checkpoints = [_checkpoint(run, c) for c in parsed.checkpoints]
    except (KeyError, TypeError, ValueError, InvalidOperation) as exc:
        raise ImportRefused(f"the file is not a run export: {type(exc).__name__}: {exc}") from None
    _verify(run, steps)
    with transaction.atomic():
        if Run.objects.filter(pk=run.pk).exists():
            raise ImportRefused(f"run {run.pk} is here already")
        run.save(force_insert=True)
        Step.objects.bulk_create(steps, batch_size=500)
        Checkpoint.objects.bulk_create(checkpoints, batch_size=500)
    return run


def _verify(run: Run, steps: list[Step]) -> None:
    prev = ""
    for expected, step in enumerate(steps, start=1):
        if step.seq != expected:
            raise ImportRefused(f"step #{expected} is missing (found #{step.seq} there)")
        if step.prev_hash != prev:
            raise ImportRefused(f"step #{step.seq} is not chained to the step before it")
        if step.compute_hash() != step.hash:
            raise ImportRefused(f"step #{step.seq} was changed: its hash is not its content's")
        prev = step.hash
    if len(steps) != run.last_seq:
        raise ImportRefused(
            f"the run says its timeline has {run.last_seq} step(s); the file holds {len(steps)}"
        )
    run.last_hash = prev


def _when(value: Any) -> datetime | None:
    if value in (None, ""):
        return None
    parsed = parse_datetime(str(value))
    if parsed is None:
        raise ValueError(f"not a date and time: {value!r}")
    return parsed


def _run(record: dict) -> Run:
    limits, counters, usage = record["limits"], record["counters"], record["usage"]
    outcome = record.get("outcome") or {}
    status = record["status"]
    detail = record.get("status_detail", "")
    reason = record.get("termination_reason", "")
    if status in Run.ACTIVE_STATUSES:
        detail = f"imported while {status}; runs here only as a replay"
        status, reason = Run.Status.CANCELLED, Run.Termination.CANCELLED
    if status not in Run.Status.values or (reason and reason not in Run.Termination.values):
        raise ValueError(f"unknown status {status!r} or termination {reason!r}")
    trigger = record.get("trigger", Run.Trigger.API)
    return Run(
        id=UUID(str(record["id"])),
        agent=str(record["agent"])[:64],
        agent_config=record["agent_config"],
        provider=str(record.get("provider", "scripted"))[:32],
        input=record["input"],
        input_summary=str(record.get("input_summary", ""))[:200],
        status=status,
        status_detail=detail[:500],
        termination_reason=reason,
        output=str(record.get("output", "")),
        trigger=trigger if trigger in Run.Trigger.values else Run.Trigger.API,
        source=f"imported; {record.get('source') or 'no source'}"[:200],
        max_steps=int(limits["max_steps"]),
        max_cost_usd=Decimal(str(limits["max_cost_usd"])),
        max_seconds=int(limits["max_seconds"]),
        max_consecutive_errors=int(limits["max_consecutive_errors"]),
        step_count=int(counters["steps"]),
        error_count=int(counters["errors"]),
        consecutive_errors=int(counters["consecutive_errors"]),
        retry_count=int(counters["retries"]),
        tokens_in=int(usage["tokens_in"]),
        tokens_out=int(usage["tokens_out"]),
        cost_usd=Decimal(str(usage["cost_usd"])),
        approved_count=int(outcome.get("approved", 0)),
        edited_count=int(outcome.get("edited", 0)),
        rejected_count=int(outcome.get("rejected", 0)),
        answered_count=int(outcome.get("answered", 0)),
        expired_count=int(outcome.get("expired", 0)),
        tool_failed_count=int(outcome.get("tool_failed", 0)),
        last_seq=int(counters["last_seq"]),
        created_at=_when(record["created_at"]),
        started_at=_when(record.get("started_at")),
        finished_at=_when(record.get("finished_at")),
    )


def _step(run: Run, record: dict) -> Step:
    return Step(
        run=run,
        seq=int(record["seq"]),
        kind=str(record["kind"]),
        data=record["data"],
        cost_usd=Decimal(str(record["cost_usd"])),
        tokens_in=int(record["tokens_in"]),
        tokens_out=int(record["tokens_out"]),
        latency_ms=int(record["latency_ms"]),
        created_at=_when(record["created_at"]),
        hash=str(record["hash"]),
        prev_hash=str(record["prev_hash"]),
    )


def _checkpoint(run: Run, record: dict) -> Checkpoint:
    return Checkpoint(
        run=run,
        seq=int(record["seq"]),
        state=record["state"],
        created_at=_when(record["created_at"]),
    )
