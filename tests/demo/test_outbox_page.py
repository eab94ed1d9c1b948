"""The demo outbox page: what the product e-mailed, reachable from the navigation by admins
(notifications carry other people's one-tap links), every field shown as text."""

import pytest
from django.core.mail import EmailMessage
from django.test import Client

pytestmark = pytest.mark.django_db

HOSTILE = '<script>alert("x")</script>'


def page(user, url="/outbox/"):
    client = Client()
    client.force_login(user)
    return client.get(url)


def test_an_admin_reads_every_e_mail_escaped_from_the_navigation(admin_user, settings):
    settings.EMAIL_BACKEND = "demo.mail.OutboxEmailBackend"
    EmailMessage(
        subject=f"Refund {HOSTILE}", body=f"We refunded {HOSTILE}", to=["c@example.com"]
    ).send()
    EmailMessage(subject="Approval needed", body="one-tap link", to=["arthur@example.com"]).send()
    response = page(admin_user, "/")
    assert 'href="/outbox/"' in response.content.decode()  # in the navigation
    response = page(admin_user)
    assert response.status_code == 200
    shown = response.content.decode()
    assert HOSTILE not in shown
    assert "Refund &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in shown
    assert "We refunded &lt;script&gt;" in shown
    assert shown.index("Approval needed") < shown.index("Refund &lt;script")  # newest first
    assert "c@example.com" in shown and "arthur@example.com" in shown


@pytest.mark.parametrize("role", ["viewer", "operator", "approver"])
def test_other_roles_are_refused_and_not_shown_the_link(role, request):
    user = request.getfixturevalue(role)
    assert page(user).status_code == 403
    assert 'href="/outbox/"' not in page(user, "/").content.decode()


def test_it_asks_for_a_login():
    response = Client().get("/outbox/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_it_refuses_a_post():
    assert Client().post("/outbox/").status_code == 405
