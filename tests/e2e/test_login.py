"""Signing in and out with the demo logins, in a real browser."""

import re

import pytest
from playwright.sync_api import expect

from .conftest import PASSWORD

pytestmark = pytest.mark.e2e


def test_a_wrong_password_keeps_the_user_out(server, browser):
    context = browser.new_context(base_url=server.url)
    page = context.new_page()
    page.goto("/runs/")
    # Pages need a login; the form brings the user back where they were going.
    page.wait_for_url(re.compile(re.escape("/accounts/login/?next=/runs/") + "$"))
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD + "-wrong")
    page.click("button[type=submit]")
    expect(page.get_by_role("alert")).to_contain_text("enter a correct username and password")
    assert "/accounts/login/" in page.url
    assert not [c for c in context.cookies() if c["name"] == "sessionid"]

    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{server.url}/runs/")
    context.close()


def test_each_demo_login_reaches_the_dashboard(login, server):
    for username in ("operator", "approver", "admin"):
        session = login(username)
        assert session.page.url == f"{server.url}/"
        # The navigation with its live count of pending approvals is on every page.
        expect(session.page.locator("#nav-pending-count")).to_have_text(re.compile(r"^\d+$"))
        assert not session.console_errors, session.console_errors
