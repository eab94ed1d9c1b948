"""Schedules over the JSON API: list (any role), create, pause, resume and delete (admins, as
in the admin), with the admin's validation (the agent, the cron expression, the time zone,
the input checked as POST /api/runs checks it)."""

from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Router, Schema, Status

from accounts.auth import api_auth
from accounts.requests import ApiRequest

from .models import Schedule

router = Router(tags=["schedules"], auth=api_auth("can_view"))
ADMINS = api_auth("is_admin")


class ScheduleIn(Schema):
    name: str
    agent: str
    input: dict[str, Any] = {}
    cron: str = ""
    timezone: str = "UTC"
    interval_seconds: int | None = None
    enabled: bool = True
    allow_overlap: bool = False


class ScheduleOut(Schema):
    id: int
    name: str
    agent: str
    input: dict[str, Any]
    cron: str
    timezone: str
    interval_seconds: int | None
    description: str
    enabled: bool
    allow_overlap: bool
    next_run_at: datetime | None
    last_run_at: datetime | None
    last_run: str | None
    last_skip_reason: str

    @staticmethod
    def resolve_last_run(obj: Schedule) -> str | None:
        return str(obj.last_run_id) if obj.last_run_id else None


class Errors(Schema):
    detail: list[dict[str, Any]]


@router.get("/schedules", response=list[ScheduleOut], summary="Every schedule")
def list_schedules(request: ApiRequest):
    return list(Schedule.objects.visible_to(request.auth).order_by("name"))


@router.post(
    "/schedules",
    response={201: ScheduleOut, 422: Errors},
    auth=ADMINS,
    summary="Add a schedule (admins); validated as in the admin",
)
def create_schedule(request: HttpRequest, body: ScheduleIn):
    schedule = Schedule(**body.dict())
    try:
        # The model's checks (clean: agent, cron, zone, input) and its constraints (cron xor
        # interval, minimum interval, a unique name).
        schedule.full_clean()
    except ValidationError as exc:
        return Status(
            422,
            {
                "detail": [
                    {"loc": ["body", field], "msg": message}
                    for field, messages in exc.message_dict.items()
                    for message in messages
                ]
            },
        )
    schedule.save()
    return Status(201, schedule)


def _set_enabled(pk: int, enabled: bool) -> Schedule:
    schedule = get_object_or_404(Schedule, pk=pk)
    schedule.enabled = enabled
    if enabled:
        schedule.next_run_at = None  # from the next slot on, not the ones missed while paused
    schedule.save()
    return schedule


@router.post("/schedules/{pk}/pause", response=ScheduleOut, auth=ADMINS, summary="Pause")
def pause_schedule(request: HttpRequest, pk: int):
    return _set_enabled(pk, False)


@router.post("/schedules/{pk}/resume", response=ScheduleOut, auth=ADMINS, summary="Resume")
def resume_schedule(request: HttpRequest, pk: int):
    return _set_enabled(pk, True)


@router.delete("/schedules/{pk}", response={204: None}, auth=ADMINS, summary="Delete")
def delete_schedule(request: HttpRequest, pk: int):
    get_object_or_404(Schedule, pk=pk).delete()
    return Status(204, None)
