"""Compensation after a partial failure, in a real browser: the exchange desk refunds, its
replacement's dispatch is refused and the run fails; the operator compensates the refund from
the run page, an approver approves the reversal at its gate, and the run page and the audit
view show the refund beside its compensation."""

import re
import uuid

import pytest
from playwright.sync_api import expect

from .pages import RUN_URL, decide, expect_status, open_launch_form

pytestmark = pytest.mark.e2e


def test_the_operator_compensates_a_refund_of_a_failed_run_through_its_gate(server, login):
    operator = login("operator")
    page = operator.page
    open_launch_form(operator, "exchange-desk")
    page.fill("[name=order_id]", "13")
    page.fill("[name=amount]", "40.00")
    page.click("button#launch")
    page.wait_for_url(RUN_URL)
    run_id = RUN_URL.search(page.url)["id"]
    expect_status(page, "waiting")

    approver = login("approver")
    decide(approver, server.pending_approval(run_id), "approve")
    # The refund committed, then the warehouse refused the replacement: the run failed.
    expect_status(page, "failed")
    section = page.locator("#run-compensation")
    row = section.locator("tr[data-effect]")
    expect(row).to_have_count(1)
    expect(row).to_have_attribute("data-state", "not compensated")
    expect(row).to_contain_text("Refund 40.00 on order 13")
    expect(row).to_contain_text("reverse_refund")
    operator.mark_document()

    # One press asks once, however fast it is pressed again (the button is disabled while
    # the request is out, and the server refuses a second request).
    with page.expect_response(lambda r: r.url.endswith("/compensate/")) as answer:
        row.locator("button[id^=compensate-]").click()
    assert answer.value.status == 200
    # (Its answer's message may be replaced at once by the fragment the pushed step fetches.)
    expect(section.locator("tr[data-effect]")).to_have_attribute("data-state", "pending")
    [(child,)] = server.query(
        "SELECT compensating_run_id FROM runs_compensation WHERE run_id = ?", server.key(run_id)
    )
    child_id = str(uuid.UUID(str(child)))
    assert server.refunds(run_id)[0][0] == 13

    # The reversal waits at its gate like any irreversible call, then runs once approved.
    reversal = server.pending_approval(child_id, tool="reverse_refund")
    assert _reversed(server, run_id) is None
    approver.goto(f"/approvals/{reversal}/")
    # The approver reads what it undoes, and who asked.
    expect(approver.page.locator("main")).to_contain_text(
        re.compile(r"Compensation asked by operator: it undoes effect #\d+ of run")
    )
    decide(approver, reversal, "approve", navigate=False)
    server.wait_for_status(child_id, "succeeded")
    assert _reversed(server, run_id) is not None

    # The run page learns it live (the settled step is pushed), without a reload.
    compensated = page.locator("#run-compensation tr[data-effect]")
    expect(compensated).to_have_attribute("data-state", "compensated")
    expect(page.locator("#timeline")).to_contain_text("compensation requested")
    expect(page.locator("#timeline")).to_contain_text("compensation compensated")
    expect(compensated.locator("button")).to_have_count(0)
    operator.assert_same_document()

    # The audit view: the effect beside its compensation and the run that made it.
    operator.goto(f"/audit/runs/{run_id}/")
    audit_row = page.locator("#audit-compensation tr[data-effect]")
    expect(audit_row).to_contain_text("Refund 40.00 on order 13")
    expect(audit_row).to_contain_text(re.compile(r"asked by olivia|asked by operator"))
    expect(audit_row).to_have_attribute("data-state", "compensated")
    expect(audit_row.locator(f"a[href='/runs/{child_id}/']")).to_have_count(1)
    expect(page.locator("#chain-status")).to_have_attribute("data-ok", "true")
    # The compensation run's own timeline: its gate, the decision, the ledgered call.
    operator.goto(f"/runs/{child_id}/")
    expect(page.locator("#timeline .step[data-kind=gate]")).to_have_count(1)
    expect(page.locator("#timeline .step[data-kind=tool]")).to_contain_text("reverse_refund")
    assert not operator.console_errors and not approver.console_errors


def _reversed(server, run_id: str):
    [(when,)] = server.query(
        "SELECT reversed_at FROM demo_refund WHERE run_id = ?", server.key(run_id)
    )
    return when
