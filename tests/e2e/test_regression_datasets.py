"""An approver edits a refund; an operator adds that decision to a regression dataset from the
approval's page and runs the dataset against the agent: the case fails with the diff shown."""

import uuid

import pytest
from playwright.sync_api import expect

from .pages import decide, expect_status, launch_refund

pytestmark = pytest.mark.e2e


def test_an_edited_refund_becomes_a_failing_regression_case(server, login):
    operator = login("operator")
    page = operator.page
    run = launch_refund(operator, order_id=13, amount="20.00", reason="Late")
    expect_status(page, "waiting")
    ((pending,),) = server.query(
        "SELECT id FROM approvals_approval WHERE run_id = ? AND status = 'pending'",
        server.key(run),
    )
    approval = str(uuid.UUID(str(pending)))  # SQLite keeps a UUID as 32 hex digits

    approver = login("approver")
    decide(approver, approval, "edit-approve", args={"amount": "5.00"}, reason="late by a day")

    operator.goto("/datasets/")
    page.fill("#id_name", f"late-refunds-{run[:8]}")
    page.select_option("#id_agent", "refund-desk")
    page.click("#create-dataset")
    expect(page.locator("h1")).to_contain_text("late-refunds")

    operator.goto(f"/approvals/{approval}/")
    page.select_option("#add-to-dataset select", label=f"late-refunds-{run[:8]}")
    page.click("#add-to-dataset-submit")
    expect(page.locator("#cases tbody tr")).to_have_count(1)
    expect(page.locator("#cases")).to_contain_text("edited")

    page.select_option("#id_provider", "scripted")
    page.click("#run-regression")
    expect(page.locator("#summary")).to_contain_text("0 of 1 case(s) passed")
    row = page.locator("#results tr[data-outcome=fail]")
    expect(row).to_contain_text('"5.00"')
    expect(row).to_contain_text('"20.00"')
    assert operator.console_errors == []
