"""The gate policy learns: after five unedited approvals of small goodwill credits an admin
accepts the proposed rule; a matching credit then runs without a gate and its run page says
"approved by rule #N"; a rejection in a sampled check revokes the rule, and the next credit
is gated again.

The server samples with a known seed (conftest.SAMPLING_SEED): whether a call is a sampled
check is a function of its arguments, so the test picks customers that are (or are not)."""

from types import SimpleNamespace

import pytest
from playwright.sync_api import expect

from agentkit.agents import get_agent
from agentkit.tools import get_tool
from approvals.gates import cascade

from .conftest import SAMPLING_SEED, screenshot
from .pages import RUN_URL, decide, expect_status, open_launch_form

pytestmark = pytest.mark.e2e

AGENT = "goodwill-desk"


def is_checked(email: str, settings) -> bool:
    """Whether the server will send this credit to a person as a sampled check of a rule."""
    settings.AGENTOPS = {**settings.AGENTOPS, "GATE_SAMPLING_SEED": SAMPLING_SEED}
    tool = get_tool("grant_goodwill_credit")
    args = tool.validate({"customer_email": email, "amount": "15", "reason": "late delivery"})
    draw = cascade.sampler(SimpleNamespace(agent=AGENT), {"args": args}, tool, "rule-check")
    return draw.random() < get_agent(AGENT).gates.learning.check_rate


def launch_credit(session, email: str) -> str:
    page = session.page
    open_launch_form(session, AGENT)
    page.fill("[name=customer_email]", email)
    page.fill("[name=amount]", "15")
    page.select_option("[name=reason]", "late delivery")
    page.click("button#launch")
    page.wait_for_url(RUN_URL)
    return RUN_URL.search(page.url)["id"]


def rule_of(server) -> tuple[int, str]:
    rows = server.query(
        "SELECT id, status FROM approvals_autoapproverule WHERE agent = ? ORDER BY id DESC",
        AGENT,
    )
    assert rows, "no rule was proposed"
    return rows[0]


def test_an_accepted_rule_approves_until_a_sampled_check_is_rejected(server, login, settings):
    unchecked = [e for e in (f"u{i}@example.com" for i in range(60)) if not is_checked(e, settings)]
    checked = next(e for e in (f"c{i}@example.com" for i in range(200)) if is_checked(e, settings))

    operator, approver = login("operator"), login("approver")
    # Five approvals without an edit: the bar the goodwill desk declares.
    for email in unchecked[:5]:
        run_id = launch_credit(operator, email)
        expect_status(operator.page, "waiting")
        decide(approver, server.pending_approval(run_id, tool="grant_goodwill_credit"), "approve")
        server.wait_for_status(run_id, "succeeded")
    rule_id, status = rule_of(server)
    assert status == "proposed"

    admin = login("admin")
    admin.goto("/approvals/rules/")
    card = admin.page.locator(f"#rule-{rule_id}")
    expect(card).to_contain_text("amount <= 25, reason = 'late delivery'")
    expect(card).to_contain_text("5 consecutive approvals without an edit")
    screenshot(admin.page, "rules-proposed")
    card.locator("input[name=expires_in_days]").fill("1")
    card.locator("input[name=max_hits]").fill("20")
    card.locator("button", has_text=f"Accept rule #{rule_id}").click()
    expect(admin.page.locator(f"#rule-{rule_id}")).to_have_attribute("data-status", "active")

    # A matching credit runs without a person; its run page says which rule approved it.
    run_id = launch_credit(operator, unchecked[5])
    expect_status(operator.page, "succeeded")
    gate = operator.page.locator("#timeline .step[data-kind=gate]")
    expect(gate).to_have_count(1)
    expect(gate).to_contain_text(f"approved by rule #{rule_id}")
    expect(operator.page.locator("#timeline .step[data-kind=decision]")).to_have_count(0)
    screenshot(operator.page, "run-approved-by-rule")

    # A sampled check goes to a person; rejecting it revokes the rule.
    run_id = launch_credit(operator, checked)
    expect_status(operator.page, "waiting")
    approval = server.pending_approval(run_id, tool="grant_goodwill_credit")
    decide(approver, approval, "reject", reason="this customer already had a credit")
    server.wait_for_status(run_id, "succeeded")
    assert rule_of(server) == (rule_id, "revoked")
    admin.goto("/approvals/rules/")
    card = admin.page.locator(f"#rule-{rule_id}")
    expect(card).to_have_attribute("data-status", "revoked")
    expect(card).to_contain_text("rejected a call it covers in a sampled check")

    # The next matching credit is gated again.
    launch_credit(operator, unchecked[6])
    expect_status(operator.page, "waiting")
    expect(operator.page.locator("#timeline .step[data-kind=gate]")).to_contain_text(
        "gated: waiting for a human"
    )
