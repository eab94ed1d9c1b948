"""Launch the schedules that are due: one run per slot, however many sweepers race.
Why and how: docs/design/modules.md."""

import logging
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from agentkit.agents import get_agent
from runs import engine
from runs.budgets import models as budgets
from runs.models import Run

from .inputs import validate_input
from .models import Schedule, unknown_agent

log = logging.getLogger("agentops.schedules")


def launch_due_schedules(now: datetime | None = None) -> int:
    """Launch every enabled schedule whose slot has come; the number of runs launched."""
    now = now or timezone.now()
    due = list(Schedule.objects.due(now).order_by("next_run_at").values_list("pk", flat=True))
    launched = 0
    for pk in due:
        try:
            launched += launch_if_due(pk, now) is not None
        except Exception:  # one broken schedule must not starve the others
            log.exception("schedule %s: launching its slot failed", pk)
    return launched


def launch_if_due(pk: int, now: datetime) -> Run | None:
    """Take schedule `pk`'s due slot: move it to the next one and launch, or record why not.
    None when another sweeper has the slot, or it was skipped (`last_skip_reason`)."""
    with transaction.atomic():
        schedule = Schedule.objects.select_for_update(skip_locked=True).due(now).filter(pk=pk)
        schedule = schedule.first()
        if schedule is None:
            return None  # taken (or moved on) by another sweeper, or disabled meanwhile
        schedule.next_run_at = schedule.slot_after(now)
        return _launch_or_skip(schedule, now)


def run_now(pk: int, now: datetime | None = None) -> tuple[Run | None, str]:
    """Launch schedule `pk` at once, outside its slots (the admin's "run now"), by the same
    rules; its next slot stays as it was. (run, "") or (None, why it was skipped)."""
    now = now or timezone.now()
    with transaction.atomic():
        schedule = Schedule.objects.select_for_update().get(pk=pk)
        run = _launch_or_skip(schedule, now)
        return run, "" if run else schedule.last_skip_reason


def _launch_or_skip(schedule: Schedule, now: datetime) -> Run | None:
    """Inside the transaction that holds the schedule's row."""
    agent = get_agent(schedule.agent)
    cleaned: dict | None = None
    if agent is None:
        reason = unknown_agent(schedule.agent)
    else:
        reason = _previous_still_active(schedule) or budgets.launch_refusal(agent.slug)
        if not reason:
            # Checked again at launch: the agent's form may have changed since the save.
            cleaned, errors = validate_input(agent, schedule.input)
            reason = "; ".join(f"{f}: {' '.join(m)}" for f, m in errors.items())
            reason = f"input no longer valid: {reason}" if reason else ""
    if reason or agent is None or cleaned is None:
        schedule.record_skip(reason, now)
        log.info("schedule %s (%s) skipped: %s", schedule.pk, schedule.name, reason)
        return None
    run = engine.launch(
        agent=agent,
        input=cleaned,
        trigger=Run.Trigger.SCHEDULE,
        launched_by=None,
        source=f"schedule {schedule.pk} {schedule.name}",
    )
    schedule.record_launch(run, now)
    return run


def _previous_still_active(schedule: Schedule) -> str:
    if schedule.allow_overlap or schedule.last_run_id is None:
        return ""
    # Read now, inside the transaction: the previous run may have finished a moment ago.
    active = Run.objects.active().filter(pk=schedule.last_run_id)
    status = active.values_list("status", flat=True).first()
    return f"previous run still {status}" if status else ""
