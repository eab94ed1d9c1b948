"""The schedules JSON API: list for any role; create, pause, resume, delete for admins, with
the admin's validation."""

import json

import pytest

from triggers.models import Schedule

pytestmark = pytest.mark.django_db

GOOD = {
    "name": "weekday revenue report",
    "agent": "sql-analyst",
    "input": {"question": "Revenue by category yesterday?", "report_to": "a@example.com"},
    "cron": "0 7 * * 1-5",
    "timezone": "Europe/Paris",
}


def post(client, url, body=None):
    return client.post(url, json.dumps(body or {}), content_type="application/json")


def test_an_admin_adds_pauses_resumes_and_deletes_a_schedule(client, admin_user):
    client.force_login(admin_user)
    created = post(client, "/api/schedules", GOOD)
    assert created.status_code == 201, created.content
    schedule = created.json()
    assert schedule["description"] == "cron 0 7 * * 1-5 (Europe/Paris)"
    assert schedule["next_run_at"] is not None
    listed = client.get("/api/schedules").json()
    assert [s["name"] for s in listed] == [GOOD["name"]]
    paused = post(client, f"/api/schedules/{schedule['id']}/pause").json()
    assert paused["enabled"] is False
    assert post(client, f"/api/schedules/{schedule['id']}/resume").json()["enabled"] is True
    assert client.delete(f"/api/schedules/{schedule['id']}").status_code == 204
    assert not Schedule.objects.exists()


@pytest.mark.parametrize(
    "change, field",
    [
        ({"cron": "61 * * * *"}, "cron"),
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"agent": "nope"}, "agent"),
        ({"input": {"question": "x"}}, "input"),
        ({"cron": "", "interval_seconds": 5}, "__all__"),
    ],
)
def test_it_refuses_what_the_admin_form_refuses(client, admin_user, change, field):
    client.force_login(admin_user)
    response = post(client, "/api/schedules", {**GOOD, **change})
    assert response.status_code == 422, response.content
    assert field in {error["loc"][-1] for error in response.json()["errors"]}
    assert not Schedule.objects.exists()


def test_reading_needs_a_role_and_changing_needs_an_admin(client, viewer, operator):
    client.force_login(viewer)
    assert client.get("/api/schedules").status_code == 200
    client.force_login(operator)
    assert post(client, "/api/schedules", GOOD).status_code == 403
    assert not Schedule.objects.exists()
