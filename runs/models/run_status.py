"""A run's status changes: the compare-and-set `transition_to` and the moves made with it
(cancel, park, terminate), each appending its status step; going back to work is
run_resume.py's. Part of `Run` (run.py); imports nothing of the engine or above runs."""

from typing import TYPE_CHECKING, Any, Self, cast

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from .choices import TERMINAL_STATUSES, TRANSITIONS, Status, Termination
from .signals import run_cancelled
from .step import Step
from .timeline import RunTimeline

if TYPE_CHECKING:
    from . import Run


class RunStatusChanges(RunTimeline):
    """The status part of Run: each move appends its step to the timeline. The Run's fields
    it uses are declared below for the type checker (run.py defines them)."""

    if TYPE_CHECKING:
        objects: Any
        agent: str
        version: int
        seconds_waited: float
        waiting_since: Any
        finished_at: Any
        paused_at: Any

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def can_transition(self, new: str) -> bool:
        return new in TRANSITIONS[self.status]

    def transition_to(self, new: str, *, expect: str | None = None, **fields: Any) -> bool:
        """Compare-and-set the status; False means another process moved the run first.

        The caller appends the matching timeline step in the same transaction.
        """
        old = expect or self.status
        if new not in TRANSITIONS[old]:
            return False
        now = timezone.now()
        if new in TERMINAL_STATUSES:
            fields.setdefault("finished_at", now)
            fields.setdefault("lease_owner", "")
            fields.setdefault("lease_expires_at", None)
        fields.update(status=new, updated_at=now)
        updated = (
            type(self)
            .objects.filter(pk=self.pk, status=old)
            .update(version=F("version") + 1, **fields)
        )
        if updated:
            for name, value in fields.items():
                setattr(self, name, value)
            self.version += 1
        return bool(updated)

    @classmethod
    def locked(cls, pk: Any) -> Self:
        """The run re-read under a row lock; call inside transaction.atomic()."""
        return cls.objects.select_for_update().get(pk=pk)

    def cancel(self, *, by=None, reason: str = "") -> bool:
        """Operator cancel of a queued, running or waiting run. False if already finished."""
        with transaction.atomic():
            run = self.locked(self.pk)
            if run.is_terminal:
                return False
            old = run.status
            run.transition_to(
                Status.CANCELLED,
                termination_reason=Termination.CANCELLED,
                status_detail=reason or "cancelled by an operator",
            )
            run.append_step(
                Step.Kind.STATUS,
                {
                    "event": "cancelled",
                    "from": old,
                    "to": Status.CANCELLED,
                    "reason": Termination.CANCELLED,
                    "detail": reason,
                    "by": by.get_username() if by else None,
                },
            )
            run_cancelled.send(sender=type(self), run=run, by=by.get_username() if by else None)
        cast("Run", self).refresh_from_db()
        return True

    def park(
        self, detail: str, *, reason: str, note: str = "", by: str | None = None, **fields: Any
    ) -> bool:
        """Running -> waiting (for people, an operation, a rate limit's window, an operator's
        pause), with its paused step; the wait's start is kept so it can be left out of
        working time. Call under the run's row lock. `detail` is the run's status line,
        `reason` and `note` (the status line if empty) the step's, `by` who asked for it (an
        operator's pause); `fields`, more of the run's fields set with the status. False,
        with no step, when it was not running."""
        if not self.transition_to(
            Status.WAITING,
            status_detail=detail,
            lease_owner="",
            lease_expires_at=None,
            waiting_since=timezone.now(),
            **fields,
        ):
            return False
        step = {
            "event": "paused",
            "from": Status.RUNNING,
            "to": Status.WAITING,
            "reason": reason,
            "detail": note or detail,
        }
        if by is not None:
            step["by"] = by
        self.append_step(Step.Kind.STATUS, step)
        return True

    @property
    def is_paused(self) -> bool:
        """Parked by an operator's pause (not by a gate or an operation)."""
        return self.status == Status.WAITING and self.paused_at is not None

    def terminate(self, status: str, reason: str, detail: str = "", *, output: str = "") -> bool:
        """End the run (a terminal `status`, Run.TRANSITIONS) with its terminated step. Call
        under the run's row lock; False, with no step, when it may not end that way (it
        already ended). The engine ends its own runs by compare-and-set (terminator.py)
        with the same step."""
        old = self.status
        if not self.transition_to(
            status, termination_reason=reason, status_detail=detail[:500], output=output
        ):
            return False
        self.append_step(Step.Kind.STATUS, self.terminated_step(old, status, reason, detail))
        return True

    @staticmethod
    def terminated_step(old: str, status: str, reason: str, detail: str) -> dict:
        """The terminated step's data."""
        return {
            "event": "terminated",
            "from": old,
            "to": status,
            "reason": reason,
            "detail": detail,
        }
