"""Two-factor sign-in in a real browser: a person sets up an authenticator app from the key
the page shows, signs out, and signs in again with the password and then a current code."""

import re
from base64 import b32decode

import pytest
from django_otp.oath import totp
from playwright.sync_api import expect

pytestmark = pytest.mark.e2e

PASSWORD = "two-factor-pw-1"
MAKE_USER = (
    "from django.contrib.auth.models import Group; from accounts.models import User; "
    "u = User.objects.create_user('tess', password='{pw}'); "
    "u.groups.add(Group.objects.get(name='operator'))"
)


def code(key: str, *, step_ahead: int = 0) -> str:
    # The app's code; a code of a time step already used is refused, so the second use takes
    # the next step's (accepted within django-otp's tolerance of one step).
    return f"{totp(b32decode(key), drift=step_ahead):06d}"


def test_a_person_sets_up_a_code_and_then_signs_in_with_it(server, browser):
    server.up.manage(MAKE_USER.format(pw=PASSWORD))
    context = browser.new_context(base_url=server.url)
    page = context.new_page()
    page.goto("/accounts/login/")
    page.fill("#id_username", "tess")
    page.fill("#id_password", PASSWORD)
    page.click("form[action='/accounts/login/'] button[type=submit]")
    page.wait_for_url(f"{server.url}/")

    page.click("a.who")
    expect(page.locator("#two-factor-status")).to_contain_text("Off")
    page.click("#two-factor-start button")
    key = page.locator("#two-factor-key").inner_text().strip()
    expect(page.locator("#two-factor-uri")).to_contain_text(
        f"otpauth://totp/agentops%3Atess?secret={key}"
    )
    page.fill("#id_code", "000000" if code(key) != "000000" else "111111")
    page.click("#two-factor-confirm button")
    expect(page.get_by_role("alert")).to_contain_text("not right")
    page.wait_for_timeout(1100)  # django-otp's throttle after one wrong code: 1 s
    page.fill("#id_code", code(key))
    page.click("#two-factor-confirm button")
    expect(page.locator("#two-factor-status")).to_contain_text("On")

    page.click("form.signout button")
    page.wait_for_url(re.compile(r"/accounts/login/"))
    page.goto("/runs/")
    page.fill("#id_username", "tess")
    page.fill("#id_password", PASSWORD)
    page.click("form[action='/accounts/login/'] button[type=submit]")
    page.wait_for_url(f"{server.url}/accounts/two-factor/verify/")
    # Not signed in yet: another page sends back to the sign-in form; the code step waits.
    page.goto("/runs/")
    page.wait_for_url(re.compile(r"/accounts/login/\?next="))
    page.goto("/accounts/two-factor/verify/")
    page.fill("#id_code", code(key, step_ahead=1))
    page.click("#two-factor-verify button")
    # Where the sign-in began (its `next`), kept across the code step.
    page.wait_for_url(f"{server.url}/runs/")
    expect(page.locator("a.who")).to_have_text("tess")
    context.close()
