"""An operator steering a live run: pause and resume it, send its agent an instruction, and
choose what becomes of a failed step the agent asked a person about (on_failure="ask").

The run page and the API call these; the engine takes them up at its step boundaries
(runs/engine/steering.py). Each takes the run's row lock, so two clicks, or a click and the
worker, are served one after the other, and each is idempotent: a second pause finds the
first, a retried instruction (same key) finds the one it made, a second choice finds the
first one ("already chosen by X at T"). Every refusal is a SteerError with an HTTP status.
"""

from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentkit.tools import ToolArgsError, get_tool

from .models import Instruction, Recovery, Run, Step


class SteerError(Exception):
    """Why the request cannot be served, in words for the operator, with its HTTP status."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _steerable(run: Run) -> None:
    if run.is_terminal:
        raise SteerError(
            409, f"run already finished: {run.status} ({run.get_termination_reason_display()})"
        )
    if run.trigger == Run.Trigger.EXTERNAL:
        raise SteerError(409, "an external agent's session is steered by the agent itself")


def request_pause(run: Run, *, by) -> bool:
    """Ask for a pause, taken at the run's next step boundary (a waiting or queued run
    pauses when it next runs). False when one was asked already: a double click pauses once."""
    with transaction.atomic():
        locked = Run.locked(run.pk)
        _steerable(locked)
        if locked.pause_requested_at is not None:
            return False
        Run.objects.filter(pk=run.pk).update(
            pause_requested_at=timezone.now(), pause_requested_by=by
        )
    run.refresh_from_db()
    return True


def resume(run: Run, *, by) -> str:
    """Resume a paused run (queued for a worker at once), or withdraw a pause not taken yet.
    "resumed" or "withdrawn"; SteerError 409 when there is no pause to end."""
    username = by.get_username()
    with transaction.atomic():
        locked = Run.locked(run.pk)
        _steerable(locked)
        cleared = {"pause_requested_at": None, "pause_requested_by": None, "paused_at": None}
        if locked.is_paused:
            locked.resume(f"resumed by {username}", by=username, **cleared)
            outcome = "resumed"
        elif locked.pause_requested_at is not None:
            Run.objects.filter(pk=run.pk).update(**cleared)
            outcome = "withdrawn"
        else:
            raise SteerError(409, "the run is not paused")
    run.refresh_from_db()
    return outcome


def instruct(run: Run, *, text: str, key: str, by) -> tuple[Instruction, bool]:
    """Queue an instruction for the agent's next model turn: (the instruction, whether it is
    new). The same key again returns the instruction it made; with other text, 409."""
    text = text.strip()
    if not text:
        raise SteerError(422, "the instruction is empty")
    if len(text) > Instruction.MAX_CHARS:
        raise SteerError(422, f"the instruction is longer than {Instruction.MAX_CHARS} characters")
    key = key.strip()
    if not key or len(key) > 100:
        raise SteerError(422, "the idempotency key must be 1 to 100 characters")
    with transaction.atomic():
        locked = Run.locked(run.pk)
        _steerable(locked)
        existing = Instruction.objects.filter(run=locked, key=key).first()
        if existing is not None:
            if existing.text != text:
                raise SteerError(409, "this idempotency key was used for another instruction")
            return existing, False
        return Instruction.objects.create(run=locked, text=text, key=key, by=by), True


@dataclass(frozen=True)
class Choice:
    """What an operator chose for a held failure (Recovery.Choice), with its details."""

    choice: str
    args: dict | None = None  # retry: the arguments to try instead (None: the same)
    note: str = ""  # skip: what the agent is told instead of the result
    text: str = ""  # instruct: the instruction the agent gets with the failure


def open_recovery(run: Run) -> Recovery | None:
    return run.recoveries.filter(status=Recovery.Status.OPEN).first()


def choose(run: Run, choice: Choice, *, by) -> Recovery:
    """Apply an operator's choice to the run's failed step and resume the run: its audit
    step (who chose what) and the run's change are one write."""
    if choice.choice not in Recovery.Choice.values:
        raise SteerError(422, "choose retry, skip or instruct")
    note, text = choice.note.strip(), choice.text.strip()
    if choice.choice == Recovery.Choice.INSTRUCT and not text:
        raise SteerError(422, "an instruction for the agent is needed")
    for value in (note, text):
        if len(value) > Instruction.MAX_CHARS:
            raise SteerError(422, f"longer than {Instruction.MAX_CHARS} characters")
    username = by.get_username()
    with transaction.atomic():
        locked = Run.locked(run.pk)
        recovery = locked.recoveries.select_for_update().filter(status=Recovery.Status.OPEN).first()
        if recovery is None:
            raise SteerError(409, _no_open_recovery(locked))
        _steerable(locked)
        edited = _checked_args(recovery, choice) if choice.choice == Recovery.Choice.RETRY else None
        now = timezone.now()
        Recovery.objects.filter(pk=recovery.pk).update(
            status=Recovery.Status.DECIDED,
            choice=choice.choice,
            edited_args=edited,
            note=note if choice.choice == Recovery.Choice.SKIP else text,
            decided_by=by,
            decided_at=now,
        )
        if choice.choice == Recovery.Choice.INSTRUCT:
            Instruction.objects.create(
                run=locked, text=text, key=f"recovery-{recovery.pk}", by=by, source="recovery"
            )
        step: dict[str, Any] = {
            "event": "recovery",
            "choice": choice.choice,
            "tool": recovery.tool,
            "failed_seq": recovery.failed_seq,
            "recovery": recovery.pk,
            "by": username,
        }
        if edited is not None:
            step["edited_args"] = edited
        if note and choice.choice == Recovery.Choice.SKIP:
            step["note"] = note
        if choice.choice == Recovery.Choice.INSTRUCT:
            step["text"] = text
        if not locked.resume(
            f"{choice.choice} chosen by {username}", first=(Step.Kind.OPERATOR, step, {})
        ):
            raise SteerError(409, "the run is not waiting for this choice")
    recovery.refresh_from_db()
    run.refresh_from_db()
    return recovery


def _checked_args(recovery: Recovery, choice: Choice) -> dict | None:
    """The edited arguments, validated as the model's are (None: retry as they were)."""
    if choice.args is None or choice.args == recovery.args:
        return None
    if not isinstance(choice.args, dict):
        raise SteerError(422, "the arguments must be a JSON object")
    tool = get_tool(recovery.tool)
    if tool is None:
        raise SteerError(409, f"the tool {recovery.tool!r} is no longer registered")
    try:
        return tool.validate(choice.args)
    except ToolArgsError as exc:
        raise SteerError(422, f"invalid arguments for {recovery.tool}: {exc}") from exc


def _no_open_recovery(run: Run) -> str:
    last = run.recoveries.select_related("decided_by").order_by("-created_at", "-id").first()
    if last is not None and last.status == Recovery.Status.DECIDED:
        who = last.decided_by.get_username() if last.decided_by else "an operator"
        return f"already chosen: {last.choice} by {who} at {last.decided_at:%Y-%m-%d %H:%M:%S} UTC"
    return "no failed step waits for a choice"


def cancel_with_run(sender, run: Run, **kwargs) -> None:
    """Receiver of runs.models.run_cancelled: a cancelled run's failure waits for no one."""
    run.recoveries.filter(status=Recovery.Status.OPEN).update(status=Recovery.Status.CANCELLED)
