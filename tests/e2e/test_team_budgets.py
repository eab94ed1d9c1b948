"""A team's budget in the browser: an admin puts an agent in a team whose approver
administers it; that approver, no admin, sets the team's budget on the Budgets page (a team's
budget only: no agent to pick), sees it with the team's agents, changes and removes it."""

import pytest
from playwright.sync_api import expect

from .test_teams import delete_teams, make_team

pytestmark = pytest.mark.e2e


def test_a_teams_administrator_sets_its_budget(server, login):
    admin = login("admin")
    try:
        make_team(admin, "Ledger", "revenue-check", {"approver": ["decide", "administer"]})
        approver = login("approver")
        approver.goto("/budgets/")
        page = approver.page
        expect(page.locator("#budget-new [name=agent]")).to_have_count(0)
        page.select_option("#budget-new [name=team]", "ledger")
        page.select_option("#budget-new [name=period]", "week")
        page.fill("#budget-new [name=amount_usd]", "25")
        page.click("#budget-new button[type=submit]")
        row = page.locator("tr.budget-row[data-team='ledger']")
        expect(row).to_contain_text("team Ledger")
        expect(row).to_contain_text("revenue-check")
        expect(row).to_have_attribute("data-level", "ok")
        row.get_by_role("link", name="Edit").click()
        expect(page.locator("h1")).to_have_text("Budget of team Ledger")
        page.fill("[name=amount_usd]", "30")
        page.click("#save-budget")
        row = page.locator("tr.budget-row[data-team='ledger']")
        expect(row).to_contain_text("$30.00")
        row.get_by_role("button", name="Remove").click()
        expect(page.locator("tr.budget-row[data-team='ledger']")).to_have_count(0)
        assert not approver.console_errors and not admin.console_errors
    finally:
        delete_teams(admin)  # the server is the whole suite's
