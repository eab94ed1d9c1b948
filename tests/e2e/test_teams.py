"""Teams in the browser: an admin splits the agents between two teams on the Teams page, and
the approver now in team Bravo no longer sees team Alpha's approval, cannot open it, and cannot
use the one-tap link e-mailed before the split."""

import pytest
from playwright.sync_api import expect

from .conftest import Session
from .pages import expect_status, launch_refund
from .test_one_tap import one_tap_link

pytestmark = pytest.mark.e2e


def make_team(admin: Session, name: str, agent: str, members: dict[str, list[str]]) -> None:
    """Fill the Teams page's form: the team, one agent, members with their powers."""
    page = admin.page
    admin.goto("/teams/new/")
    page.fill("#id_name", name)
    page.fill("#id_slug", name.lower())
    page.check(f"input[name=agents][value={agent}]")
    for i, (username, powers) in enumerate(members.items()):
        page.select_option(f"[name=members-{i}-user]", username)
        for power in powers:
            page.check(f"[name=members-{i}-{power}]")
    page.click("#save-team")
    expect(page.locator(".alert.ok")).to_contain_text(f"Team {name} saved.")


def delete_teams(admin: Session) -> None:
    page = admin.page
    while True:
        admin.goto("/teams/")
        rows = page.locator(".team-row a")
        if not rows.count():
            return
        rows.first.click()
        page.click("#delete-team")
        page.wait_for_url("**/teams/")


def test_an_approver_of_another_team_neither_sees_nor_decides_its_approvals(server, login):
    operator, admin = login("operator"), login("admin")
    run_id = launch_refund(operator, order_id=11, amount="9.00", reason="Team split")
    expect_status(operator.page, "waiting")
    approval_id = server.pending_approval(run_id)
    # Mailed while every agent still belonged to no team: the approver could decide it then.
    link = one_tap_link(server, approval_id, "approver@agentops.localhost")
    # The server is the suite's: earlier tests may have left pending approvals, of agents in
    # no team (every approver still sees them) and of refund-desk (Alpha's after the split,
    # this one among them): those leave the approver's count.
    approver = login("approver")
    approver.goto("/approvals/")
    expect(approver.page.locator(f"[data-approval-id='{approval_id}']")).to_have_count(1)
    pending_before = int(approver.page.locator("#nav-pending-count").inner_text())
    ((refund_desk,),) = server.query(
        "SELECT COUNT(*) FROM approvals_approval a JOIN runs_run r ON a.run_id = r.id "
        "WHERE a.status = 'pending' AND r.agent = 'refund-desk'"
    )
    try:
        make_team(admin, "Alpha", "refund-desk", {"operator": ["launch"]})
        make_team(admin, "Bravo", "sql-analyst", {"approver": ["decide"]})
        expect(admin.page.locator("body")).to_be_visible()
        admin.goto("/teams/")
        expect(admin.page.locator(".team-row[data-team=alpha]")).to_contain_text("refund-desk")

        approver.goto("/approvals/")
        expected = pending_before - refund_desk
        expect(approver.page.locator("#nav-pending-count")).to_have_text(str(expected))
        expect(approver.page.locator(f"[data-approval-id='{approval_id}']")).to_have_count(0)
        response = approver.page.goto(f"/approvals/{approval_id}/")
        assert response is not None and response.status == 404
        response = approver.page.goto(link)
        assert response is not None and response.status == 403
        expect(approver.page.locator("#one-tap-refused")).to_contain_text(
            "Your teams do not see this approval."
        )
        # Alpha's admin view is unchanged: the approval still waits, undecided.
        admin.goto("/approvals/")
        expect(admin.page.locator(f"[data-approval-id='{approval_id}']")).to_have_count(1)
        assert server.query(
            "SELECT status FROM approvals_approval WHERE id = ?", server.key(approval_id)
        ) == [("pending",)]
    finally:
        # The server is the whole suite's: the agents go back to no team.
        delete_teams(admin)
        operator.goto(f"/runs/{run_id}/")
        operator.page.click("#cancel-run")
