"""The schedules page: any role reads it; next and last run shown, everything escaped."""

import pytest
from django.test import Client
from django.utils import timezone

from runs.models import Run
from triggers import scheduler
from triggers.models import Schedule

from .conftest import AGENT, INPUT

pytestmark = pytest.mark.django_db

HOSTILE = '<script>alert("x")</script>'


def test_it_lists_schedules_with_next_and_last_run_escaped(viewer, no_enqueue):
    launched = Schedule.objects.create(
        name=f"nightly {HOSTILE}", agent=AGENT, input=INPUT, interval_seconds=3600
    )
    Schedule.objects.filter(pk=launched.pk).update(next_run_at=timezone.now())
    assert scheduler.launch_due_schedules() == 1
    run = Run.objects.get()
    waiting = Schedule.objects.create(
        name="weekdays", agent=AGENT, input=INPUT, cron="0 9 * * 1-5", timezone="Europe/Paris"
    )
    skipped = Schedule.objects.create(name="skipped", agent=AGENT, input=INPUT, cron="0 * * * *")
    skipped.record_skip(f"previous run still {HOSTILE}", timezone.now())
    client = Client()
    client.force_login(viewer)
    response = client.get("/schedules/")
    assert response.status_code == 200
    page = response.content.decode()
    assert HOSTILE not in page
    assert "nightly &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert "previous run still &lt;script&gt;" in page
    assert f'href="/runs/{run.pk}/"' in page
    waiting.refresh_from_db()
    assert waiting.next_run_at.strftime("%Y-%m-%d %H:%M:%S") in page
    assert "cron 0 9 * * 1-5 (Europe/Paris)" in page
    assert "every 1 h" in page
    assert page.count("never") >= 2  # the two that have not run yet


def test_disabled_schedules_show_no_next_run(viewer):
    off = Schedule.objects.create(
        name="off", agent=AGENT, input=INPUT, interval_seconds=600, enabled=False
    )
    assert off.next_run_at is not None
    client = Client()
    client.force_login(viewer)
    page = client.get("/schedules/").content.decode()
    row = page.split(f'id="schedule-{off.pk}"')[1].split("</tr>")[0]
    assert "disabled" in row
    assert "UTC" not in row  # no next run shown


def test_the_nav_links_to_it(viewer):
    client = Client()
    client.force_login(viewer)
    assert 'href="/schedules/"' in client.get("/").content.decode()


def test_the_page_says_when_there_is_none(viewer):
    client = Client()
    client.force_login(viewer)
    assert "No schedule yet" in client.get("/schedules/").content.decode()


def test_webhook_secrets_are_listed_by_fingerprint_never_the_secret(viewer, admin_user):
    from triggers.models import WebhookSecret

    live = WebhookSecret.objects.create(agent=AGENT, name=f"billing {HOSTILE}")
    gone = WebhookSecret.objects.create(agent=AGENT, name="old sender")
    gone.revoke()
    client = Client()
    client.force_login(viewer)
    page = client.get("/schedules/").content.decode()
    section = page[page.index('id="webhook-secrets"') :]
    assert live.fingerprint in section and gone.fingerprint in section
    assert live.secret not in page and gone.secret not in page
    assert "billing &lt;script&gt;" in section and HOSTILE not in page
    assert "revoked" in section and "usable" in section
    assert "/admin/triggers/webhooksecret/" not in page  # the admin's links are for admins
    admin_user.is_staff = True  # the admin site's own rule
    admin_user.save()
    client.force_login(admin_user)
    page = client.get("/schedules/").content.decode()
    assert 'href="/admin/triggers/webhooksecret/"' in page
