"""A run's timeline writes: each step appended hash-chained to the one before, with the
run's head (last_seq, last_hash) moved in the same write, and the chain checked again. Part
of `Run` (run.py); the hot path writes through runs/sql.py."""

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from django.db import connections
from django.utils import timezone

from agentkit import pii
from agentkit.database import in_batches

from .. import sql
from .canonical import _as_stored_spelling, _plain_canonical
from .signals import step_appended
from .step import Checkpoint, Step

if TYPE_CHECKING:
    from . import Run

# Every column of a step but its id (runs/sql.py inserts them).
STEP_COLUMNS = (
    "run",
    "seq",
    "kind",
    "data",
    "cost_usd",
    "tokens_in",
    "tokens_out",
    "latency_ms",
    "created_at",
    "prev_hash",
    "hash",
    "run_created",
)

# A checkpoint's columns but its id (the state is upserted per run and seq).
CHECKPOINT_COLUMNS = ("run", "seq", "state", "created_at", "run_created")


def checkpoint_conflict() -> tuple[str, ...]:
    """The columns of a checkpoint's upsert (ON CONFLICT): its unique constraint's, which on
    Postgres holds the partition key too (runs/migrations/0028)."""
    if connections["default"].vendor == "postgresql":
        return ("run", "seq", "run_created")
    return ("run", "seq")


def _publish_on_commit(step: "Step") -> None:
    step_appended.send(sender=Step, step=step)


class RunTimeline:
    """The timeline part of Run; the Run's fields it uses are declared below for the type
    checker (run.py defines them)."""

    if TYPE_CHECKING:
        pk: Any
        status: str
        trigger: str
        source: str
        created_at: Any
        agent_config: Any
        last_seq: int
        last_hash: str
        steps: Any

    @property
    def _run(self) -> "Run":
        """This part as the Run it is a part of (for the type checker: a mixin's self is not)."""
        return cast("Run", self)

    def append_step(
        self, kind: str, data: dict, *, update: dict | None = None, **columns: Any
    ) -> "Step":
        """Append one step, hash-chained to the previous one; `update` sets more of the
        run's fields in the same UPDATE.

        Must run inside a transaction that holds this run's row lock (see `locked`), so
        seq stays contiguous and the chain has one head.
        """
        step = self._next_step(kind, data, columns)
        sql.update(
            type(self._run),
            {"last_seq": step.seq, "last_hash": step.hash, **(update or {})},
            {"id": self.pk},
        )
        return self._saved(step, update)

    def append_step_if_expected(
        self,
        kind: str,
        data: dict,
        *,
        expect: dict,
        update: dict | None = None,
        checkpoint: dict | None = None,
        then: tuple[tuple[str, dict, dict], ...] = (),
        also: Sequence[sql.Update] = (),
        **columns: Any,
    ) -> "Step | None":
        """Append a step if the run's row still holds the `expect`ed values and the timeline
        head this copy knows; with `then`, (kind, data, columns) steps that follow it in
        the same write (a final answer and the run's termination: one is never recorded
        without the other); with `checkpoint`, also the engine state after the last of them;
        with `also`, other rows' updates that belong with the step (a call's ledger outcome).

        One compare-and-set UPDATE both takes the row lock and checks; on Postgres the steps
        and checkpoint go in the same statement (runs/sql.py). None: nothing was written.
        Returns the first step.
        """
        steps = [self._next_step(kind, data, columns)]
        for then_kind, then_data, then_columns in then:
            steps.append(self._next_step(then_kind, then_data, dict(then_columns), after=steps[-1]))
        inserts: list[sql.Insert] = [(step, STEP_COLUMNS, (), ()) for step in steps]
        if checkpoint is not None:
            row = Checkpoint(
                run=self._run,
                seq=steps[-1].seq,
                state=checkpoint,
                run_created=self._run.created_at,
            )
            inserts.append((row, CHECKPOINT_COLUMNS, checkpoint_conflict(), ("state",)))
        written = sql.update_then_insert(
            type(self._run),
            {"last_seq": steps[-1].seq, "last_hash": steps[-1].hash, **(update or {})},
            {**expect, "id": self.pk, "last_seq": self.last_seq},
            inserts,
            also,
        )
        if not written:
            return None
        for step in steps:
            self._applied(step, update)
        return steps[0]

    def _next_step(
        self, kind: str, data: dict, columns: dict, *, after: "Step | None" = None
    ) -> "Step":
        columns.setdefault("created_at", timezone.now())
        step = Step(
            run=self._run,
            seq=(after.seq if after else self.last_seq) + 1,
            kind=kind,
            data=self.recorded(data),
            prev_hash=after.hash if after else self.last_hash,
            run_created=self._run.created_at,
            **columns,
        )
        try:
            text = _as_stored_spelling(_plain_canonical(step.data), step.data, _plain_canonical)
        except (TypeError, ValueError):  # not plain JSON: hashed as ever, stored as ever
            step.hash = step.compute_hash()
        else:
            # Encoded once for both: the hash covers this text, and the insert stores it
            # (runs/sql.py: on Postgres, where jsonb keeps the value and not its spelling).
            step.hash = step.compute_hash(data_json=text)
            step.json_text = {"data": text}
        return step

    def recorded(self, data: dict) -> dict:
        """A step's data as the timeline keeps it. With a PII policy, personal data is masked
        before the step is written: the timeline never holds it, so nothing that shows or
        exports the timeline can leak it (run page, live frames, steps API, evidence,
        exports, logs) and the hash chain covers what is kept. The raw values live only
        where the run needs them: its checkpoint (the conversation the model continues) and
        the call an approver decides."""
        return self.masked(data)

    def masked(self, value: Any) -> Any:
        """`value` (JSON: the input, the output, a step's data) with personal data masked as
        the timeline keeps it, when the agent has a PII policy; as it is otherwise."""
        policy = (self.agent_config or {}).get("pii") if self.agent_config else None
        return pii.masker(policy)(value) if policy else value

    def first_step(self, *, by: str | None, **details: Any) -> "Step":
        """The launched step of a run not saved yet (who launched it, its input, and what
        else the launcher records); the run's head points at it, so the caller inserts both
        (and a checkpoint) in one go, then publishes the step."""
        data = {
            "event": "launched",
            "from": None,
            "to": self.status,
            "trigger": self.trigger,
            "source": self.source,
            "by": by,
            **details,
        }
        step = self._next_step(Step.Kind.STATUS, data, {"created_at": self.created_at})
        self.last_seq, self.last_hash = step.seq, step.hash
        return step

    def _saved(self, step: "Step", update: dict | None) -> "Step":
        sql.insert(step, STEP_COLUMNS)
        return self._applied(step, update)

    def _applied(self, step: "Step", update: dict | None) -> "Step":
        self.last_seq, self.last_hash = step.seq, step.hash
        for name, value in (update or {}).items():
            setattr(self, name, value)
        _publish_on_commit(step)
        return step

    def verify_chain(self) -> tuple[bool, int | None]:
        """Recompute the hash chain; returns (ok, first bad seq)."""
        prev = ""
        expected_seq = 1
        for step in in_batches(self.steps.all(), by=("seq",)):
            if (
                step.seq != expected_seq
                or step.prev_hash != prev
                or step.compute_hash() != step.hash
            ):
                return False, step.seq
            prev = step.hash
            expected_seq += 1
        return prev == self.last_hash, None if prev == self.last_hash else expected_seq
