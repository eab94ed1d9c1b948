"""Security keys in a real browser: Chromium's virtual authenticator (DevTools' WebAuthn domain)
stands in for a passkey. A person adds it on the security page, is shown their recovery codes
once (copy and download buttons work under the CSP), signs out, signs in with the password
and the key, then with the password and a recovery code.

WebAuthn needs a secure context: http counts as one only on `localhost`, so these pages are
opened at localhost (the live server listens on 127.0.0.1, which localhost reaches; an IP
address can never be a relying party id).
"""

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.e2e

PASSWORD = "security-key-pw-1"
MAKE_USER = (
    "from django.contrib.auth.models import Group; from accounts.models import User; "
    "u = User.objects.create_user('kim', password='{pw}'); "
    "u.groups.add(Group.objects.get(name='operator'))"
)


def password_sign_in(page, base: str) -> None:
    page.goto(f"{base}/runs/")
    page.fill("#id_username", "kim")
    page.fill("#id_password", PASSWORD)
    page.click("form[action='/accounts/login/'] button[type=submit]")


def test_a_person_adds_a_passkey_and_signs_in_with_it(server, browser):
    server.up.manage(MAKE_USER.format(pw=PASSWORD))
    base = server.url.replace("127.0.0.1", "localhost")
    context = browser.new_context()
    page = context.new_page()
    problems: list[str] = []
    page.on(
        "console",
        lambda m: problems.append(m.text) if m.type == "error" else None,
    )
    cdp = context.new_cdp_session(page)
    cdp.send("WebAuthn.enable")
    authenticator = cdp.send(
        "WebAuthn.addVirtualAuthenticator",
        {
            "options": {
                "protocol": "ctap2",
                "transport": "internal",
                "hasResidentKey": True,
                "hasUserVerification": True,
                "isUserVerified": True,
            }
        },
    )["authenticatorId"]

    password_sign_in(page, base)
    page.wait_for_url(f"{base}/runs/")
    page.click("a.who")
    page.fill("#id_key_name", "Virtual key")
    page.click("#security-key-add button")
    # The first factor comes with its recovery codes, shown once.
    codes = page.locator("#recovery-codes-fresh li code")
    expect(codes).to_have_count(10)
    first_code = codes.first.inner_text().strip()
    assert re.fullmatch(r"[a-z2-7]{4}-[a-z2-7]{4}", first_code)
    with page.expect_download() as download:
        page.click("#recovery-codes-download")
    saved = Path(download.value.path()).read_text()
    assert first_code in saved and saved.count("\n") >= 10
    expect(page.locator("#security-key-list")).to_contain_text("Virtual key")
    credentials = cdp.send("WebAuthn.getCredentials", {"authenticatorId": authenticator})
    assert len(credentials["credentials"]) == 1

    page.click("form.signout button")
    page.wait_for_url(re.compile(r"/accounts/login/"))
    password_sign_in(page, base)
    page.wait_for_url(f"{base}/accounts/two-factor/verify/")
    page.click("#two-factor-key button")
    # Where the sign-in began (its `next`), kept across the key step.
    page.wait_for_url(f"{base}/runs/")
    expect(page.locator("a.who")).to_have_text("kim")
    ((sign_count, last_used),) = server.query(
        "SELECT sign_count, last_used_at FROM accounts_webauthncredential"
    )
    assert last_used is not None
    stored = cdp.send("WebAuthn.getCredentials", {"authenticatorId": authenticator})
    assert sign_count == stored["credentials"][0]["signCount"]

    # The key not at hand: a recovery code instead, once.
    page.click("form.signout button")
    page.wait_for_url(re.compile(r"/accounts/login/"))
    password_sign_in(page, base)
    page.wait_for_url(f"{base}/accounts/two-factor/verify/")
    page.click("#recovery-code summary")
    page.fill("#id_recovery_code", first_code.upper())
    page.click("#two-factor-recovery button")
    page.wait_for_url(f"{base}/runs/")
    page.click("a.who")
    expect(page.locator("#recovery-codes-left")).to_contain_text("9 of 10")
    assert not [p for p in problems if "Content Security Policy" in p], problems
    context.close()
