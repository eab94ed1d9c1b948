"""The compliance evidence file's format: hash-chained lines and a signed trailer, as CSV or
JSONL, and its verification. Standard library only, so a file can be checked offline with the
key; approvals/evidence/export.py builds the records from the database.
Why and how: docs/design/modules.md."""

import csv
import hashlib
import hmac
import io
import itertools
import json
import secrets
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

FORMATS = ("csv", "jsonl")
VERSION = 1
# The columns of a record, in file order.
FIELDS = (
    "decided_at",
    "approval",
    "run",
    "agent",
    "kind",
    "tool",
    "args_hash",
    "approved_args_hash",
    "risk",
    "gated_because",
    "requested_at",
    "seconds_pending",
    "decision",
    "outcome",
    "decided_by",
    "acting_for",
    "authority",
    "escalation_tier",
    "rule",
    "rule_accepted_by",
    "votes",
    "via",
    "edited",
    "reason",
    "answer",
    "opened_at",
    "seconds_open",
    "step_seq",
    "step_hash",
)
# CSV only: the kind of line, its record's fields, the header's / trailer's details, the chain.
CSV_COLUMNS = ("line", *FIELDS, "details", "prev_hash", "line_hash")
# Spreadsheets run a cell starting with one of these as a formula (CSV injection).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
# Names the key derived from SECRET_KEY when no dedicated key is set (export.signing_key,
# by agentkit/signing.py): changed, no export signed before would verify.
KEY_SALT = b"agentops.approvals.evidence_export"


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def chain_hash(prev_hash: str, payload: str) -> str:
    return hashlib.sha256(f"{prev_hash}\n{payload}".encode()).hexdigest()


def sign(trailer: dict, key: bytes) -> str:
    """HMAC-SHA256 of the trailer's fields other than the signature itself: the MAC of
    agentkit/signing.py (`hmac_sha256`), written out here, not imported, so the verifier needs
    the standard library alone (tests/approvals/test_evidence_export.py holds the two equal)."""
    body = _canonical({k: v for k, v in trailer.items() if k != "signature"})
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


def key_id(key: bytes) -> str:
    """A short public name of the key, so a verifier can say "signed with another key"."""
    return hashlib.sha256(b"key-id\n" + key).hexdigest()[:12]


def csv_cell(value) -> str:
    """A value as a CSV cell: text that a spreadsheet would run as a formula gets a leading
    apostrophe (the file still carries the text; the chain covers the cell as written)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    text = value if isinstance(value, str) else _canonical(value)
    if text.startswith(FORMULA_STARTS):
        return "'" + text
    return text


# --- writing -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Header:
    since: datetime
    until: datetime
    agent: str = ""
    created_at: datetime | None = None
    export_id: str = ""
    team: str = ""
    # The agents the export was limited to (a team's, the exporter's teams'); None: all.
    agents: tuple[str, ...] | None = None

    def as_dict(self, fmt: str) -> dict:
        return {
            "version": VERSION,
            "format": fmt,
            "export_id": self.export_id or secrets.token_hex(16),
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "agent": self.agent,
            "team": self.team,
            "agents": list(self.agents) if self.agents is not None else None,
            "created_at": (self.created_at or datetime.now().astimezone()).isoformat(),
            "fields": list(FIELDS),
        }


def signed_lines(records: Iterable[dict], *, fmt: str, header: Header, key: bytes) -> Iterator[str]:
    """The export as text lines (each ending in a newline), one record at a time: a caller
    streams them without holding the export in memory."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}")
    writer = _CsvLines() if fmt == "csv" else None
    if writer is not None:
        yield writer.line(CSV_COLUMNS)
    head = header.as_dict(fmt)
    prev = ""
    count = 0
    line, prev = _line("export", head, prev, writer, details=True)
    yield line
    for record in records:
        line, prev = _line("decision", record, prev, writer)
        count += 1
        yield line
    trailer = {
        "records": count,
        "final_hash": prev,
        "export_id": head["export_id"],
        "key_id": key_id(key),
        "algorithm": "sha256-chain+hmac-sha256",
    }
    trailer["signature"] = sign(trailer, key)
    line, _ = _line("trailer", trailer, prev, writer, details=True)
    yield line


def _line(kind: str, body: dict, prev: str, writer, *, details: bool = False) -> tuple[str, str]:
    if writer is None:
        payload = _canonical({"line": kind, **body})
        digest = chain_hash(prev, payload)
        return _canonical({"line": kind, **body, "prev_hash": prev, "line_hash": digest}) + "\n", (
            digest
        )
    if details:
        cells = [kind, *([""] * len(FIELDS)), _canonical(body)]
    else:
        cells = [kind, *(csv_cell(body.get(f)) for f in FIELDS), ""]
    digest = chain_hash(prev, _canonical(cells))
    return writer.line([*cells, prev, digest]), digest


class _CsvLines:
    """csv.writer onto a reusable buffer: one formatted line at a time."""

    def __init__(self) -> None:
        self.buffer = io.StringIO()
        self.writer = csv.writer(self.buffer, lineterminator="\n")

    def line(self, cells) -> str:
        self.buffer.seek(0)
        self.buffer.truncate()
        self.writer.writerow(cells)
        return self.buffer.getvalue()


# --- verifying -------------------------------------------------------------------------------
@dataclass
class Verification:
    ok: bool
    problem: str = ""
    records: int = 0
    header: dict | None = None
    trailer: dict | None = None

    def __str__(self) -> str:
        if self.ok:
            head = self.header or {}
            return (
                f"OK: {self.records} decision record(s) from {head.get('since')} to "
                f"{head.get('until')}, chain intact, signature valid"
            )
        return f"TAMPERED OR INCOMPLETE: {self.problem}"


class _Bad(Exception):
    pass


def verify(lines: Iterable[str] | str, *, key: bytes) -> Verification:
    """Check a whole export, read line by line (a file opened with newline="" or a list of
    lines): the chain, the header first, the trailer last and its signature. The first problem
    found is reported, with its line number. Memory stays flat whatever the file's size."""
    if isinstance(lines, str):
        lines = io.StringIO(lines, newline="")
    try:
        return _verify_lines(_parsed(iter(lines)), key)
    except _Bad as exc:
        return Verification(False, str(exc))


def verify_file(path, *, key: bytes) -> Verification:
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            return verify(handle, key=key)
    except (OSError, UnicodeDecodeError) as exc:
        return Verification(False, f"cannot read {path}: {exc}")


def _parsed(lines: Iterator[str]) -> Iterator[tuple[int, str, dict, str, str, str]]:
    """(line number, kind, body, payload the hash covers, prev_hash, line_hash) per line."""
    first = next(lines, "")
    if first.startswith("line,"):
        yield from _parsed_csv(first, lines)
        return
    number = 0
    for number, raw in enumerate(itertools.chain([first], lines), start=1):
        if not raw.strip():
            if number == 1:
                return
            raise _Bad(f"line {number}: empty line")
        obj = _json(raw, number)
        if not isinstance(obj, dict):
            raise _Bad(f"line {number}: not a JSON object")
        prev, digest = obj.pop("prev_hash", None), obj.pop("line_hash", None)
        if not isinstance(prev, str) or not isinstance(digest, str):
            raise _Bad(f"line {number}: no prev_hash / line_hash")
        kind = obj.get("line", "")
        body = {k: v for k, v in obj.items() if k != "line"}
        yield number, kind, body, _canonical(obj), prev, digest


def _parsed_csv(first: str, lines: Iterator[str]):
    rows = csv.reader(itertools.chain([first], lines))
    if tuple(next(rows)) != CSV_COLUMNS:
        raise _Bad("line 1: not the export's CSV header")
    for row in rows:
        number = rows.line_num
        if len(row) != len(CSV_COLUMNS):
            raise _Bad(f"line {number}: {len(row)} cells, expected {len(CSV_COLUMNS)}")
        cells, prev, digest = row[:-2], row[-2], row[-1]
        kind = cells[0]
        if kind in ("export", "trailer"):
            body = _json(cells[-1], number)
            if not isinstance(body, dict):
                raise _Bad(f"line {number}: details are not a JSON object")
        else:
            body = dict(zip(FIELDS, cells[1:-1], strict=True))
        yield number, kind, body, _canonical(cells), prev, digest


def _json(raw: str, number: int):
    try:
        return json.loads(raw)
    except ValueError:
        raise _Bad(f"line {number}: not valid JSON") from None


def _verify_lines(lines: Iterator[tuple], key: bytes) -> Verification:
    prev = ""
    header = trailer = None
    records = 0
    before_trailer = ""
    for index, (number, kind, body, payload, claimed_prev, digest) in enumerate(lines):
        if trailer is not None:
            raise _Bad(f"line {number}: lines follow the trailer")
        if claimed_prev != prev:
            raise _Bad(
                f"line {number}: prev_hash does not match the line before it "
                "(a line was removed, moved or inserted, or two exports were spliced)"
            )
        if chain_hash(prev, payload) != digest:
            raise _Bad(f"line {number}: its content does not match its line_hash (edited)")
        before_trailer, prev = prev, digest
        if index == 0:
            if kind != "export":
                raise _Bad(f"line {number}: the export's header line is missing")
            header = body
        elif kind == "trailer":
            trailer = body
        elif kind == "decision":
            records += 1
        else:
            raise _Bad(f"line {number}: unknown line kind {kind!r}")
    if header is None:
        raise _Bad("empty file")
    if trailer is None:
        raise _Bad("no trailer: the file is truncated")
    return _check_trailer(header, trailer, records, before_trailer, key)


def _check_trailer(header: dict, trailer: dict, records: int, final: str, key: bytes):
    if trailer.get("export_id") != header.get("export_id"):
        raise _Bad("the trailer belongs to another export (spliced)")
    if trailer.get("records") != records:
        raise _Bad(f"the trailer counts {trailer.get('records')} records, the file has {records}")
    if trailer.get("final_hash") != final:
        raise _Bad("the trailer's final_hash is not the chain's last hash")
    if trailer.get("key_id") != key_id(key):
        raise _Bad(
            f"signed with another key (key id {trailer.get('key_id')}, yours is {key_id(key)})"
        )
    if not hmac.compare_digest(str(trailer.get("signature", "")), sign(trailer, key)):
        raise _Bad("the trailer's signature is not valid: the trailer or chain was rebuilt")
    return Verification(True, records=records, header=header, trailer=trailer)
