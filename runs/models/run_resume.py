"""A run going back to work: `resume` (waiting -> queued, or running for an external session)
and `reopen` (failed -> queued from a checkpoint), each one write with its steps, the run
then sent to a worker once committed. Part of `Run` (run.py); imports nothing above runs."""

from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from .. import queue
from .choices import Status, Trigger
from .step import Step
from .timeline import RunTimeline


class RunResumption(RunTimeline):
    """The resuming part of Run: a person's decision, an operator's Resume or choice. The
    Run's fields it uses are declared below for the type checker (run.py defines them)."""

    if TYPE_CHECKING:
        agent: str
        version: int
        seconds_waited: float
        waiting_since: Any
        finished_at: Any

    def resume(
        self,
        detail: str,
        *,
        first: tuple[str, dict, dict] | None = None,
        by: str | None = None,
        **fields: Any,
    ) -> bool:
        """Waiting -> queued (a person decided what it waited for), with its step, and sent
        to a worker once committed; an external session goes back to running, unsent. Call
        under the run's row lock (`locked`); False when it was not waiting (a quick decision
        found it still running: its worker goes on).

        `first` is (kind, data, update) of a step that comes before the resumed one (the
        decision that resumed it): both steps and the run's change are one write. `by`: the
        operator who resumed it (their Resume); `fields`: more of the run's fields to set.
        """
        if self.status != Status.WAITING:
            return False
        # An external session is not the engine's to advance: its agent, long-polling for
        # the decision, goes on by itself; the run is running again for its next call.
        external = self.trigger == Trigger.EXTERNAL
        to = Status.RUNNING if external else Status.QUEUED
        now = timezone.now()
        waited = self.seconds_waited
        if self.waiting_since is not None:
            waited += (now - self.waiting_since).total_seconds()
        resumed = {
            "event": "resumed",
            "from": Status.WAITING,
            "to": to,
            "detail": detail,
        }
        if by is not None:
            resumed["by"] = by
        kind: str
        update: dict[str, Any]
        then: tuple[tuple[str, dict[str, Any], dict[str, Any]], ...]
        kind, data, update, then = Step.Kind.STATUS, resumed, {}, ()
        if first is not None:
            (kind, data, update), then = first, ((Step.Kind.STATUS, resumed, {}),)
        written = self.append_step_if_expected(
            kind,
            data,
            expect={"status": Status.WAITING},
            update={
                **update,
                # Plain values (the row is locked, so this copy is current): the write is one
                # statement with its steps.
                "version": self.version + 1,
                "status": to,
                "status_detail": "",
                "seconds_waited": waited,
                "waiting_since": None,
                "updated_at": now,
                **fields,
            },
            then=then,
        )
        if written is None:
            return False
        if not external:
            # A person's decision or choice: the run goes ahead of any backlog of runs.
            person = by is not None or kind in (Step.Kind.DECISION, Step.Kind.OPERATOR)
            transaction.on_commit(
                lambda: queue.enqueue(self.pk, agent=self.agent, for_a_person=person)
            )
        return True

    def reopen(self, *, step: dict, state: dict) -> bool:
        """Failed -> queued: an operator resumes a failed run from its last checkpoint with a
        choice (runs/steering/models.py reopen), instead of forking it. The one way out of a final
        status, so not in TRANSITIONS: its reopened step, the engine `state` it resumes
        from (a checkpoint at that step) and the run's change are one write, and it is sent
        to a worker once committed. The time it lay failed counts as waiting, not working; the
        consecutive errors start again from none. Call under the run's row lock; False when
        it was not failed."""
        if self.status != Status.FAILED:
            return False
        now = timezone.now()
        waited = self.seconds_waited + (now - (self.finished_at or now)).total_seconds()
        data = {"event": "reopened", "from": Status.FAILED, "to": Status.QUEUED, **step}
        written = self.append_step_if_expected(
            Step.Kind.STATUS,
            data,
            expect={"status": Status.FAILED},
            update={
                "version": self.version + 1,
                "status": Status.QUEUED,
                "termination_reason": "",
                "status_detail": "",
                "output": "",
                "finished_at": None,
                "consecutive_errors": 0,
                "seconds_waited": waited,
                "updated_at": now,
            },
            checkpoint=state,
        )
        if written is None:
            return False
        transaction.on_commit(lambda: queue.enqueue(self.pk, agent=self.agent, for_a_person=True))
        return True
