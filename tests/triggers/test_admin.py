"""The admin: schedules are validated as forms, secrets are shown once, rotated and revoked."""

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from runs.models import Run
from triggers.models import Schedule, WebhookSecret

from .conftest import AGENT, INPUT

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(django_user_model) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", "root@example.com"))
    return client


def schedule_form(**fields) -> dict:
    return {
        "name": "nightly report",
        "agent": AGENT,
        "input": json.dumps(INPUT),
        "cron": "0 2 * * *",
        "timezone": "Europe/Paris",
        "interval_seconds": "",
        "enabled": "on",
        **fields,
    }


# --- schedules ---------------------------------------------------------------------------------
def test_a_schedule_added_in_the_admin_gets_its_first_slot(admin_client):
    response = admin_client.post("/admin/triggers/schedule/add/", schedule_form())
    assert response.status_code == 302, response.content.decode()
    schedule = Schedule.objects.get()
    assert schedule.cron == "0 2 * * *" and schedule.input == INPUT
    assert schedule.next_run_at == schedule.first_slot(timezone.now())


@pytest.mark.parametrize(
    "fields,message",
    [
        ({"cron": "0 25 * * *"}, "Not a valid cron expression"),
        ({"cron": "every night"}, "five fields"),
        ({"timezone": "Paris"}, "Unknown time zone"),
        ({"input": json.dumps({**INPUT, "report_to": "nobody"})}, "report_to: Enter a valid email"),
        ({"input": json.dumps({"question": "q"})}, "report_to: This field is required"),
        ({"input": "{not json"}, "Enter a valid JSON"),
        ({"cron": "", "interval_seconds": ""}, "either a cron expression or an interval"),
        ({"agent": "no-such"}, "Select a valid choice"),
    ],
)
def test_an_invalid_schedule_is_a_form_error(admin_client, fields, message):
    response = admin_client.post("/admin/triggers/schedule/add/", schedule_form(**fields))
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not Schedule.objects.exists()


def test_changing_the_timing_starts_the_schedule_over(admin_client):
    admin_client.post("/admin/triggers/schedule/add/", schedule_form())
    schedule = Schedule.objects.get()
    Schedule.objects.filter(pk=schedule.pk).update(next_run_at=timezone.now() - timedelta(days=3))
    url = f"/admin/triggers/schedule/{schedule.pk}/change/"
    # A change of name only keeps the slot.
    admin_client.post(url, schedule_form(name="renamed"))
    schedule.refresh_from_db()
    assert schedule.next_run_at < timezone.now()
    admin_client.post(url, schedule_form(name="renamed", cron="", interval_seconds="600"))
    schedule.refresh_from_db()
    assert schedule.next_run_at > timezone.now() + timedelta(seconds=590)


def test_the_list_shows_the_last_run_and_run_now_launches(admin_client, no_enqueue):
    admin_client.post("/admin/triggers/schedule/add/", schedule_form())
    schedule = Schedule.objects.get()
    response = admin_client.post(
        "/admin/triggers/schedule/",
        {"action": "run_now", "_selected_action": [schedule.pk]},
        follow=True,
    )
    run = Run.objects.get()
    assert run.trigger == Run.Trigger.SCHEDULE
    page = response.content.decode()
    assert f"/runs/{run.pk}/" in page  # the message's link, and the list's last-run link
    assert "cron 0 2 * * * (Europe/Paris)" in page
    # Again while that run is queued: skipped, and the list says why.
    response = admin_client.post(
        "/admin/triggers/schedule/",
        {"action": "run_now", "_selected_action": [schedule.pk]},
        follow=True,
    )
    assert Run.objects.count() == 1
    assert "previous run still queued" in response.content.decode()


# --- webhook secrets ---------------------------------------------------------------------------
def test_a_new_secret_is_shown_once_and_never_in_lists(admin_client):
    response = admin_client.post(
        "/admin/triggers/webhooksecret/add/", {"agent": AGENT, "name": "billing"}
    )
    secret = WebhookSecret.objects.get()
    assert secret.secret.startswith("whsec_") and len(secret.secret) > 40
    assert response.status_code == 200
    assert secret.secret in response.content.decode()
    assert "no-store" in response["Cache-Control"]
    for url in (
        "/admin/triggers/webhooksecret/",
        f"/admin/triggers/webhooksecret/{secret.pk}/change/",
    ):
        page = admin_client.get(url).content.decode()
        assert secret.fingerprint in page
        assert secret.secret not in page


def test_a_secret_for_an_unknown_agent_is_a_form_error(admin_client):
    response = admin_client.post("/admin/triggers/webhooksecret/add/", {"agent": "no-such"})
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    assert not WebhookSecret.objects.exists()


def test_rotate_makes_a_new_secret_and_lets_the_old_one_expire(admin_client):
    old = WebhookSecret.objects.create(agent=AGENT, name="billing")
    response = admin_client.post(
        "/admin/triggers/webhooksecret/", {"action": "rotate", "_selected_action": [old.pk]}
    )
    new = WebhookSecret.objects.exclude(pk=old.pk).get()
    assert new.secret in response.content.decode()
    assert old.secret not in response.content.decode()
    assert new.name == "billing" and new.expires_at is None
    old.refresh_from_db()
    assert old.is_usable()
    assert (
        timezone.now() + timedelta(hours=23) < old.expires_at < timezone.now() + timedelta(hours=25)
    )


def test_revoke_refuses_the_secret_from_now_on(admin_client):
    secret = WebhookSecret.objects.create(agent=AGENT)
    admin_client.post(
        "/admin/triggers/webhooksecret/", {"action": "revoke", "_selected_action": [secret.pk]}
    )
    secret.refresh_from_db()
    assert secret.revoked_at is not None and not secret.is_usable()
    assert not WebhookSecret.objects.usable().exists()


@pytest.mark.parametrize(
    "url",
    [
        "/admin/triggers/schedule/add/",
        "/admin/triggers/schedule/",
        "/admin/triggers/webhooksecret/add/",
        "/admin/triggers/webhooksecret/",
        "/admin/triggers/webhookdelivery/",
    ],
)
def test_the_admin_pages_render(admin_client, url):
    assert admin_client.get(url).status_code == 200
