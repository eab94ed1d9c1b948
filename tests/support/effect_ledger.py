"""The chaos agent's effects file read back (bench/chaos_app.py writes it; bench/chaos.py and
tests/test_fleet.py check it): every effect that happened, and those that happened twice, per
idempotency key and per logical call (a run's `ref`)."""

import sqlite3
from dataclasses import dataclass
from pathlib import Path

SCHEMA = """
create table if not exists effect (
    ref text not null, key text not null, tool text not null, run text not null,
    pid integer not null, at real not null
);
create table if not exists call (
    ref text not null, key text not null, tool text not null, pid integer not null, at real
);
"""


def create(path: str | Path) -> None:
    db = sqlite3.connect(path)
    try:
        db.executescript(SCHEMA)
    finally:
        db.close()


@dataclass
class Ledger:
    effects: list[tuple[str, str, str, str]]  # (ref, key, tool, run)
    dup_key: dict[tuple[str, str], int]  # (tool, key) -> times it happened, when more than once
    dup_ref: dict[tuple[str, str], int]  # (run, ref) -> times it happened, when more than once
    per_ref: dict[tuple[str, str], int]  # (run, ref) -> times it happened
    retried_same_key: int  # keys a tool was called with more than once (retries, replays)


def read(path: str | Path) -> Ledger:
    db = sqlite3.connect(path)
    try:
        effects = db.execute("select ref, key, tool, run from effect").fetchall()
        calls = db.execute("select key, count(*) from call group by key having count(*) > 1")
        retried_same_key = len(calls.fetchall())
    finally:
        db.close()
    per_key: dict[tuple[str, str], int] = {}
    # Per run and ref: a launch retried after no answer makes a second run with the same tag.
    per_ref: dict[tuple[str, str], int] = {}
    for ref, key, tool, run_id in effects:
        per_key[(tool, key)] = per_key.get((tool, key), 0) + 1
        per_ref[(run_id, ref)] = per_ref.get((run_id, ref), 0) + 1
    return Ledger(
        effects=effects,
        dup_key={k: n for k, n in per_key.items() if n > 1},
        dup_ref={r: n for r, n in per_ref.items() if n > 1},
        per_ref=per_ref,
        retried_same_key=retried_same_key,
    )


def expected_refs(tag: str, steps: int, gate: bool) -> list[str]:
    """The logical calls a completed run of the chaos agent made (bench/chaos_app.py)."""
    return [f"{tag}:{p}{i}" for i in range(steps) for p in "cn"] + ([f"{tag}:t"] if gate else [])
