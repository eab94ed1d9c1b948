"""An operator steering a live run: pause and resume it, send its agent an instruction, and
choose what becomes of a failed step the agent asked a person about (on_failure="ask").

The run page and the API call these; the engine takes them up at its step boundaries
(runs/engine/steering.py). Each takes the run's row lock, so two clicks, or a click and the
worker, are served one after the other, and each is idempotent: a second pause finds the
first, a retried instruction (same key) finds the one it made, a second choice finds the
first one ("already chosen by X at T"). Every refusal is a SteerError with an HTTP status.
"""

import copy
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentkit.agents import get_agent
from agentkit.tools import ToolArgsError, get_tool

from ..models import Checkpoint, Instruction, Recovery, Run, Step


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
        # A run held for its consecutive errors has no call to retry or skip: the model is
        # asked again (with an instruction), the count reset by this write.
        errors = not recovery.tool
        if errors and choice.choice == Recovery.Choice.SKIP:
            raise SteerError(422, "choose retry or instruct: there is no call to skip")
        retry = choice.choice == Recovery.Choice.RETRY and not errors
        edited = _checked_args(recovery, choice) if retry else None
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
        reset = {"consecutive_errors": 0} if errors else {}
        if not locked.resume(
            f"{choice.choice} chosen by {username}", first=(Step.Kind.OPERATOR, step, reset)
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


# --- "resume from here": a failed run reopened -----------------------------------------------
# Why a run ended decides whether resuming it can go otherwise: a limit reached would be
# reached again (fork it with higher limits), a person's rejection or a guardrail stands.
REOPENABLE: dict[str, tuple[str, ...]] = {
    Run.Termination.CONSECUTIVE_ERRORS: ("retry", "instruct"),
    Run.Termination.LLM_ERROR: ("retry", "instruct"),
    Run.Termination.TRUNCATED: ("retry", "instruct"),
    # The checked answer would fail again as it is: the agent is told something new.
    Run.Termination.VERIFICATION_FAILED: ("instruct",),
    Run.Termination.OUTPUT_INVALID: ("instruct",),
}


@dataclass(frozen=True)
class Reopening:
    """Whether a failed run can be resumed in place: the choices, or why not (in words)."""

    choices: tuple[str, ...] = ()
    why_not: str = ""
    failed_call: Step | None = None  # a failed call the model has not been told about


def reopening(run: Run) -> Reopening:
    if run.status != Run.Status.FAILED:
        return Reopening(why_not="only a failed run can be resumed from here")
    if run.trigger == Run.Trigger.EXTERNAL:
        return Reopening(why_not="an external agent's session is resumed by the agent itself")
    label = run.get_termination_reason_display()
    if run.termination_reason not in REOPENABLE:
        return Reopening(
            why_not=f"it ended for {label}: resuming it would end the same way; fork it from "
            "a checkpoint (with other limits or an instruction) instead"
        )
    if get_agent(run.agent) is None:
        return Reopening(why_not=f"agent {run.agent!r} is no longer in the catalogue")
    ok, bad_seq = run.verify_chain()
    if not ok:
        return Reopening(
            why_not=f"its timeline does not verify from step #{bad_seq}: it is kept as it is "
            "for audit; fork it from an earlier checkpoint instead"
        )
    failed = _unseen_failed_call(run)
    if failed is not None:
        return Reopening(("retry", "skip", "instruct"), failed_call=failed)
    return Reopening(REOPENABLE[run.termination_reason])


def _unseen_failed_call(run: Run) -> Step | None:
    """The newest failed tool call after the model's last answer: the run ended before the
    model was told (too many consecutive errors), so the call can still be retried or
    skipped in its place."""
    last_model = run.steps.filter(kind=Step.Kind.LLM).order_by("-seq").first()
    calls = run.steps.filter(kind=Step.Kind.TOOL, seq__gt=last_model.seq if last_model else 0)
    failed = calls.filter(data__is_error=True).order_by("-seq").first()
    if failed is None or failed.data.get("held") or get_tool(failed.data.get("tool", "")) is None:
        return None
    return failed


def reopen(run: Run, choice: Choice, *, by) -> Run:
    """Resume a failed run from its last checkpoint with an operator's choice: retry the
    failed call (maybe edited; gated again) or skip it with a note, when the model was not
    told of it yet; else ask the model again (retry); or give the agent an instruction.
    SteerError 409 says why a run cannot be reopened."""
    username = by.get_username()
    with transaction.atomic():
        locked = Run.locked(run.pk)
        found = reopening(locked)
        if not found.choices:
            raise SteerError(409, f"this run cannot be resumed: {found.why_not}")
        if choice.choice not in found.choices:
            raise SteerError(422, f"choose {' or '.join(found.choices)}")
        text, note = choice.text.strip(), choice.note.strip()
        if choice.choice == Recovery.Choice.INSTRUCT and not text:
            raise SteerError(422, "an instruction for the agent is needed")
        if max(len(text), len(note)) > Instruction.MAX_CHARS:
            raise SteerError(422, f"longer than {Instruction.MAX_CHARS} characters")
        latest = Checkpoint.objects.filter(run=locked).order_by("-seq").first()
        state = copy.deepcopy(latest.state) if latest else {"pending": [], "recent_calls": []}
        step: dict[str, Any] = {"choice": choice.choice, "by": username}
        step["ended_for"] = locked.termination_reason
        if choice.choice == Recovery.Choice.INSTRUCT:
            # The agent answers the instruction: a checked answer is not checked again as is.
            state.pop("checking", None)
            state.pop("check_failures", None)
            step["text"] = text
        call = found.failed_call
        recovery = None
        if call is not None:
            data = call.data
            recovery = Recovery(
                run=locked,
                failed_seq=call.seq,
                tool=data["tool"],
                tool_use_id=data["tool_use_id"],
                args=data.get("args") or {},
                error=str(data.get("error", "")),
            )
            edited = None
            if choice.choice == Recovery.Choice.RETRY:
                edited = _checked_args(recovery, choice)
            recovery.status = Recovery.Status.DECIDED
            recovery.choice = choice.choice
            recovery.edited_args = edited
            recovery.note = note if choice.choice == Recovery.Choice.SKIP else text
            recovery.decided_by = by
            recovery.decided_at = timezone.now()
            recovery.save()
            # The call is pending again, its failure taken back from the conversation: the
            # engine applies the choice as for a failure held for a person.
            item = {
                "id": data["tool_use_id"],
                "name": data["tool"],
                "input": recovery.args,
                "llm_seq": call.seq,
                "index": 0,
                "args": recovery.args,
                "error": None,
                "approval": None,
                "recovery": recovery.pk,
            }
            state["pending"] = [item, *state.get("pending", [])]
            step.update(supersedes_tool_use=data["tool_use_id"], failed_seq=call.seq)
            step["tool"] = data["tool"]
            if edited is not None:
                step["edited_args"] = edited
            if note and choice.choice == Recovery.Choice.SKIP:
                step["note"] = note
        if choice.choice == Recovery.Choice.INSTRUCT:
            Instruction.objects.create(
                run=locked,
                text=text,
                key=f"reopen-{locked.last_seq}",
                by=by,
                source="recovery",
            )
        if not locked.reopen(step=step, state=state):
            raise SteerError(409, "the run changed meanwhile; reload and try again")
    run.refresh_from_db()
    return run
