"""Properties of schedules' cron expressions (triggers/models.py): a valid expression is
accepted however it is spaced, its next slot is strictly later, never earlier for a later
moment and never skips a slot; anything else is a clear field error, never an exception."""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.core.exceptions import ValidationError
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from triggers.models import Schedule, cron_error

FAST = settings(max_examples=120, deadline=None)
ZONES = ["UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]
moments = st.datetimes(
    min_value=datetime(2024, 1, 1), max_value=datetime(2027, 12, 31), timezones=st.just(UTC)
)


def field(low: int, high: int, top: int | None = None) -> st.SearchStrategy[tuple[str, set[int]]]:
    """A cron field naming values in [low, high] and the values it stands for; `*` and
    `*/k` stand for every value up to the field's own `top`."""
    every = set(range(low, (top or high) + 1))
    value = st.integers(low, high)
    span = st.tuples(value, value).map(sorted)
    return st.one_of(
        st.just(("*", every)),
        st.integers(1, max(1, (high - low) // 2)).map(
            lambda k: (f"*/{k}", {v for v in every if (v - low) % k == 0})
        ),
        value.map(lambda v: (str(v), {v})),
        span.map(lambda ab: (f"{ab[0]}-{ab[1]}", set(range(ab[0], ab[1] + 1)))),
        st.lists(value, min_size=2, max_size=4, unique=True).map(
            lambda vs: (",".join(map(str, vs)), set(vs))
        ),
    )


# Days of the month named up to 28 so every month has each one; day of week left open: cron ORs
# the two day fields when both are restricted, which the minute/hour check below ignores.
expressions = st.tuples(field(0, 59), field(0, 23), field(1, 28, top=31), field(1, 12))


def schedule(cron: str, zone: str = "UTC") -> Schedule:
    return Schedule(name="p", agent="sql-analyst", cron=cron, timezone=zone)


def spelled(fields) -> str:
    return " ".join(text for text, _ in fields) + " *"


@FAST
@given(expressions, st.sampled_from(ZONES), moments, st.lists(st.sampled_from(" \t"), max_size=3))
def test_a_valid_expression_is_accepted_however_spaced_and_fires_later(fields, zone, now, padding):
    cron = spelled(fields)
    assert cron_error(cron) == ""
    padded = "".join(padding) + cron.replace(" ", " " + "".join(padding) + " ") + "".join(padding)
    assert cron_error(" ".join(padded.split())) == ""
    slot = schedule(cron, zone).slot_after(now)
    assert slot > now
    assert schedule(" ".join(padded.split()), zone).slot_after(now) == slot


@FAST
@given(expressions, moments)
def test_in_utc_the_next_slot_matches_every_field(fields, now):
    (_, minutes), (_, hours), (_, days), (_, months) = fields
    slot = schedule(spelled(fields)).slot_after(now)
    assert slot.second == 0 and slot.microsecond == 0
    assert slot.minute in minutes and slot.hour in hours
    assert slot.day in days and slot.month in months


@FAST
@given(expressions, st.sampled_from(ZONES), moments, st.floats(0, 1))
def test_the_next_slot_never_moves_back_and_none_is_skipped(fields, zone, now, fraction):
    """For any moment between now and the next slot, the next slot is the same one: no slot
    in between was skipped, and a later moment never gets an earlier slot."""
    sched = schedule(spelled(fields), zone)
    slot = sched.slot_after(now)
    between = now + (slot - now) * fraction
    assume(between < slot)
    assert sched.slot_after(between) == slot
    after = sched.slot_after(slot)
    assert after > slot
    assert sched.slot_after(slot - timedelta(microseconds=1)) == slot


@FAST
@given(
    st.sampled_from(
        [
            ("60 * * * *", "minute"),
            ("* 24 * * *", "hour"),
            ("* * 0 * *", "day"),
            ("* * 32 * *", "day"),
            ("0 0 30 2 *", "a day no month has"),
            ("* * * 13 *", "month"),
            ("* * * 0 *", "month"),
            ("* * * * 8", "weekday"),
            ("*/0 * * * *", "step"),
            ("5-1/x * * * *", "step"),
        ]
    ),
    st.sampled_from(ZONES),
)
def test_an_out_of_range_field_is_refused_with_a_clear_error(case, zone):
    cron, _ = case
    error = cron_error(cron)
    assert error.startswith("Not a valid cron expression: ")
    with pytest.raises(ValidationError) as refused:
        schedule(cron, zone).clean()
    assert refused.value.message_dict["cron"] == [error]


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=30),
        st.lists(
            st.text(alphabet="0123456789*/-,?LW#SUNMONjan ²٣", min_size=1, max_size=5),
            min_size=1,
            max_size=7,
        ).map(" ".join),
    )
)
def test_any_text_is_an_expression_or_a_clear_error_never_an_exception(text):
    error = cron_error(" ".join(text.split()))
    assert isinstance(error, str)
    if len(text.split()) != 5:
        assert error == "Give five fields: minute hour day-of-month month day-of-week."
    elif error:
        assert error.startswith("Not a valid cron expression: ")
    sched = schedule(text)
    try:
        sched.clean()
    except ValidationError as exc:
        errors = exc.message_dict
    else:
        errors = {}
    assert sched.cron == " ".join(text.split())  # stored as it is checked: single spaces
    if text.strip():
        assert errors.get("cron", []) == ([error] if error else [])
    if not error and text.strip():
        now = datetime(2025, 3, 30, 0, 30, tzinfo=UTC)
        assert sched.slot_after(now) > now


def test_a_nine_oclock_schedule_stays_at_nine_local_across_a_dst_change():
    sched = schedule("0 9 * * *", "Europe/Paris")
    before = sched.slot_after(datetime(2025, 3, 28, 12, tzinfo=UTC))
    after = sched.slot_after(before)
    paris = ZoneInfo("Europe/Paris")
    assert before.astimezone(paris).hour == after.astimezone(paris).hour == 9
    assert after - before == timedelta(hours=23)
