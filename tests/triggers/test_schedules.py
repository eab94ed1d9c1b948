"""Schedules: a due slot launches exactly one run, the next slot is computed (cron in its zone,
or an interval on its grid), missed slots launch once, and the overlap rule holds."""

from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError

from runs.models import Run
from triggers import scheduler
from triggers.models import Schedule

from .conftest import AGENT, INPUT

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)  # a Monday


def make(**fields) -> Schedule:
    fields = {"name": "nightly", "agent": AGENT, "input": INPUT, **fields}
    if "cron" not in fields:
        fields.setdefault("interval_seconds", 3600)
    schedule = Schedule(**fields)
    schedule.full_clean()
    schedule.save()
    return schedule


def due_at(schedule: Schedule, moment: datetime) -> Schedule:
    Schedule.objects.filter(pk=schedule.pk).update(next_run_at=moment)
    schedule.refresh_from_db()
    return schedule


def finish(run: Run) -> None:
    assert run.transition_to(Run.Status.RUNNING)
    assert run.transition_to(Run.Status.SUCCEEDED, termination_reason=Run.Termination.COMPLETED)


# --- launching ---------------------------------------------------------------------------------
def test_a_due_schedule_launches_one_run_and_moves_to_its_next_slot(
    no_enqueue, django_capture_on_commit_callbacks
):
    schedule = due_at(make(), T0)
    with django_capture_on_commit_callbacks(execute=True):
        assert scheduler.launch_due_schedules(T0 + timedelta(seconds=10)) == 1
    run = Run.objects.get()
    assert run.trigger == Run.Trigger.SCHEDULE
    assert run.source == f"schedule {schedule.pk} nightly"
    assert run.launched_by is None
    assert run.input == INPUT and run.agent == AGENT
    assert no_enqueue == [str(run.pk)]
    schedule.refresh_from_db()
    assert schedule.last_run == run
    assert schedule.last_run_at == T0 + timedelta(seconds=10)
    assert schedule.next_run_at == T0 + timedelta(hours=1)
    assert schedule.last_skip_reason == ""
    # The slot is taken: asking again at the same moment launches nothing.
    assert scheduler.launch_due_schedules(T0 + timedelta(seconds=10)) == 0
    assert Run.objects.count() == 1


def test_a_schedule_not_yet_due_launches_nothing(no_enqueue):
    schedule = due_at(make(), T0)
    assert scheduler.launch_due_schedules(T0 - timedelta(seconds=1)) == 0
    assert not Run.objects.exists()
    schedule.refresh_from_db()
    assert schedule.next_run_at == T0 and schedule.last_run is None


def test_a_disabled_schedule_launches_nothing(no_enqueue):
    due_at(make(enabled=False), T0)
    assert scheduler.launch_due_schedules(T0 + timedelta(days=1)) == 0
    assert not Run.objects.exists()


def test_missed_slots_launch_once_and_the_interval_keeps_its_grid(no_enqueue):
    schedule = due_at(make(interval_seconds=3600), T0)
    # Down for a day and ten minutes: 25 slots missed.
    now = T0 + timedelta(days=1, minutes=10)
    assert scheduler.launch_due_schedules(now) == 1
    assert scheduler.launch_due_schedules(now) == 0
    assert Run.objects.count() == 1
    schedule.refresh_from_db()
    assert schedule.next_run_at == T0 + timedelta(days=1, hours=1)


def test_missed_cron_slots_launch_once(no_enqueue):
    schedule = due_at(make(cron="0 * * * *"), T0)
    now = T0 + timedelta(days=1, minutes=30)
    assert scheduler.launch_due_schedules(now) == 1
    assert Run.objects.count() == 1
    schedule.refresh_from_db()
    assert schedule.next_run_at == T0 + timedelta(days=1, hours=1)


# --- overlap -----------------------------------------------------------------------------------
def test_a_slot_is_skipped_while_the_previous_run_is_active(no_enqueue):
    schedule = due_at(make(), T0)
    assert scheduler.launch_due_schedules(T0) == 1
    first = Run.objects.get()
    slot = T0 + timedelta(hours=1)
    assert scheduler.launch_due_schedules(slot) == 0
    assert Run.objects.count() == 1
    schedule.refresh_from_db()
    assert schedule.last_skip_reason == "previous run still queued"
    assert schedule.last_skipped_at == slot
    assert schedule.last_run == first
    # Skipped, not retried on every sweep: the next slot is the one after.
    assert schedule.next_run_at == T0 + timedelta(hours=2)
    finish(first)
    assert scheduler.launch_due_schedules(T0 + timedelta(hours=2)) == 1
    schedule.refresh_from_db()
    assert schedule.last_run != first and schedule.last_run.status == Run.Status.QUEUED


def test_a_schedule_that_allows_overlap_launches_beside_its_active_run(no_enqueue):
    due_at(make(allow_overlap=True), T0)
    assert scheduler.launch_due_schedules(T0) == 1
    assert scheduler.launch_due_schedules(T0 + timedelta(hours=1)) == 1
    assert Run.objects.active().count() == 2


@pytest.mark.parametrize("status", [Run.Status.RUNNING, Run.Status.WAITING])
def test_running_and_waiting_runs_count_as_active(no_enqueue, status):
    schedule = due_at(make(), T0)
    scheduler.launch_due_schedules(T0)
    run = Run.objects.get()
    assert run.transition_to(Run.Status.RUNNING)
    if status == Run.Status.WAITING:
        assert run.transition_to(Run.Status.WAITING)
    assert scheduler.launch_due_schedules(T0 + timedelta(hours=1)) == 0
    schedule.refresh_from_db()
    assert schedule.last_skip_reason == f"previous run still {status}"


def test_run_now_launches_outside_the_slots_and_keeps_the_next_slot(no_enqueue):
    schedule = due_at(make(), T0)
    run, reason = scheduler.run_now(schedule.pk, T0 - timedelta(minutes=30))
    assert run is not None and reason == ""
    schedule.refresh_from_db()
    assert schedule.next_run_at == T0 and schedule.last_run == run
    # The overlap rule still applies.
    again, reason = scheduler.run_now(schedule.pk, T0 - timedelta(minutes=20))
    assert again is None and reason == "previous run still queued"
    assert Run.objects.count() == 1


# --- what stops a launch ------------------------------------------------------------------------
def test_an_input_no_longer_valid_is_a_skip_not_a_crash(no_enqueue):
    schedule = due_at(make(), T0)
    Schedule.objects.filter(pk=schedule.pk).update(input={**INPUT, "report_to": "nobody"})
    other = due_at(make(name="other"), T0)
    assert scheduler.launch_due_schedules(T0) == 1  # the other one still launched
    schedule.refresh_from_db()
    assert schedule.last_skip_reason.startswith("input no longer valid: report_to")
    assert schedule.next_run_at == T0 + timedelta(hours=1)
    assert Run.objects.get().source == f"schedule {other.pk} other"


def test_an_agent_gone_from_the_catalogue_is_a_skip(no_enqueue):
    schedule = due_at(make(), T0)
    Schedule.objects.filter(pk=schedule.pk).update(agent="retired-agent")
    assert scheduler.launch_due_schedules(T0) == 0
    schedule.refresh_from_db()
    assert "unknown agent 'retired-agent'" in schedule.last_skip_reason
    assert schedule.next_run_at == T0 + timedelta(hours=1)


# --- time --------------------------------------------------------------------------------------
def test_a_new_interval_schedule_first_runs_one_interval_from_now(no_enqueue):
    before = datetime.now(UTC)
    schedule = make(interval_seconds=900)
    assert before + timedelta(seconds=900) <= schedule.next_run_at
    assert schedule.next_run_at <= datetime.now(UTC) + timedelta(seconds=900)
    assert schedule.description == "every 15 min"


def test_cron_slots_are_in_the_schedules_time_zone_across_dst():
    schedule = Schedule(cron="0 9 * * 1-5", timezone="Europe/Paris")
    # Friday 27 March 2026, 10:00 UTC (11:00 in Paris): the next weekday 9:00 in Paris is
    # Monday 30 March, after the clocks went forward on Sunday (UTC+2 then).
    friday = datetime(2026, 3, 27, 10, 0, tzinfo=UTC)
    assert schedule.first_slot(friday) == datetime(2026, 3, 30, 7, 0, tzinfo=UTC)
    # Just before 9:00 in Paris on a Thursday (UTC+1 then): the same day.
    thursday = datetime(2026, 3, 26, 7, 59, tzinfo=UTC)
    assert schedule.first_slot(thursday) == datetime(2026, 3, 26, 8, 0, tzinfo=UTC)
    assert schedule.description == "cron 0 9 * * 1-5 (Europe/Paris)"


def test_a_cron_slot_is_strictly_after_now():
    schedule = Schedule(cron="*/15 * * * *", timezone="UTC")
    assert schedule.slot_after(T0) == T0 + timedelta(minutes=15)
    assert schedule.slot_after(T0 + timedelta(seconds=1)) == T0 + timedelta(minutes=15)


def test_an_interval_slot_follows_the_due_one_on_its_grid():
    schedule = Schedule(interval_seconds=600, next_run_at=T0)
    assert schedule.slot_after(T0) == T0 + timedelta(minutes=10)
    assert schedule.slot_after(T0 + timedelta(minutes=25)) == T0 + timedelta(minutes=30)


# --- validation --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "fields,field,message",
    [
        ({"cron": "61 * * * *"}, "cron", "Not a valid cron expression"),
        ({"cron": "0 9 * *"}, "cron", "five fields"),
        ({"cron": "0 0 9 * * *"}, "cron", "five fields"),
        ({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "timezone", "Unknown time zone"),
        ({"agent": "no-such-agent"}, "agent", "unknown agent"),
        ({"input": {"question": "q"}}, "input", "report_to"),
        ({"input": {**INPUT, "question": 7}}, "input", "must be a string"),
        ({"input": [1]}, "input", "must be an object"),
        ({"interval_seconds": 10}, "__all__", "at least 60"),
        ({"cron": "0 9 * * *", "interval_seconds": 3600}, "__all__", "not both"),
        ({"interval_seconds": None}, "__all__", "either a cron expression or an interval"),
    ],
)
def test_invalid_schedules_are_field_errors(fields, field, message):
    schedule = Schedule(**{"name": "s", "agent": AGENT, "input": INPUT, **fields})
    if "cron" not in fields and "interval_seconds" not in fields:
        schedule.interval_seconds = 3600
    with pytest.raises(ValidationError) as caught:
        schedule.full_clean()
    errors = caught.value.message_dict
    assert field in errors, errors
    assert any(message in m for m in errors[field]), errors
