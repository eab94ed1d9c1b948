"""Cheaper and faster loops in the browser, with the real anthropic SDK in a live server talking
to the fake Messages API: the model that answered is on each model step (a fallback says so),
the four carriers' lookups of one turn ran together, and the dashboard's cost card says what
prompt caching saved."""

import os
import re
from collections.abc import Iterator
from decimal import Decimal

import pytest
from playwright.sync_api import Browser, expect

from tests.livesupport import kill_up, start_up, stop_up
from tests.support.fake_messages_api import FakeMessagesServer, overloaded, reply, text, tool_use

from .conftest import (
    PASSWORD,
    LiveServer,
    Session,
    drop_postgres_database,
    fresh_postgres_database,
    redis_of_the_server,
    screenshot,
    services_from_env,
)
from .pages import RUN_URL, expect_status, open_launch_form

pytestmark = pytest.mark.e2e

CARRIERS = ("parcelco", "swiftship", "eurofreight", "postal")


@pytest.fixture(scope="module")
def fake_api() -> Iterator[FakeMessagesServer]:
    # The demo agent's prefix is short; the real minimum (1024 tokens) would cache nothing.
    with FakeMessagesServer(latency=0.05, cache_min_tokens=50) as server:
        yield server


@pytest.fixture(scope="module")
def claude_server(tmp_path_factory, fake_api) -> Iterator[LiveServer]:
    """`up` with an API key and the fake API as ANTHROPIC_BASE_URL: runs call "Claude"."""
    env = {
        "AGENTOPS_DEMO_PASSWORD": PASSWORD,
        "ANTHROPIC_API_KEY": "sk-ant-e2e",
        "ANTHROPIC_BASE_URL": fake_api.base_url,
    }
    args: list[str] = []
    database = ""
    services = services_from_env()
    if services:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "")
        database = fresh_postgres_database(services[0], f"_claude{worker and '_' + worker}")
        env.update(DATABASE_URL=database, REDIS_URL=redis_of_the_server(services[1], 4))
        args.append("--with-worker")
    var_dir = tmp_path_factory.mktemp("claude-var")
    up = start_up(var_dir, *args, **env)
    try:
        if database:
            yield LiveServer(up=up, postgres_url=database)
        else:
            yield LiveServer(up=up, sqlite_path=var_dir / "agentops.sqlite3")
        stop_up(up)
    finally:
        kill_up(up)
        if database:
            drop_postgres_database(database)


def sign_in(browser: Browser, server: LiveServer, username: str) -> Session:
    context = browser.new_context(base_url=server.url, viewport={"width": 1280, "height": 860})
    page = context.new_page()
    session = Session(context=context, page=page)
    page.on("console", session.on_console)
    session.goto("/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login/" not in url)
    return session


def test_the_model_that_answered_and_what_caching_saved_are_shown(claude_server, fake_api, browser):
    fake_api.push(
        overloaded(),  # Sonnet has no capacity: Haiku, the agent's fallback, answers
        reply(
            [
                text("I'll ask the four carriers at once."),
                *(
                    tool_use("quote_shipping", carrier=c, weight_kg="4", destination="Lyon")
                    for c in CARRIERS
                ),
            ]
        ),
        # Haiku again for the next turns (Sonnet rests for the fallback cooldown): each
        # reads what the one before wrote.
        reply([tool_use("quote_shipping", carrier="postal", weight_kg="2", destination="Lyon")]),
        reply([text("Cheapest: postal.")]),
    )
    operator = sign_in(browser, claude_server, "operator")
    page = operator.page
    open_launch_form(operator, "shipping-quotes")
    page.fill("[name=destination]", "Lyon")
    page.click("button#launch")
    page.wait_for_url(RUN_URL)
    expect_status(page, "succeeded")

    models = page.locator("#timeline .step[data-kind=llm] .step-model")
    expect(models).to_have_text(["claude-haiku-4-5 (fallback from claude-sonnet-4-6)"] * 3)
    failed = page.locator("#timeline .step[data-kind=llm_error]")
    expect(failed.locator(".step-model")).to_have_text("claude-sonnet-4-6")
    expect(failed.locator("dl.facts")).to_contain_text("fallback to claude-haiku-4-5")
    expect(page.locator("#timeline .step[data-kind=tool]")).to_have_count(5)
    # The last model call read the one before's prefix from the cache.
    last = page.locator("#timeline .step[data-kind=llm]").nth(2)
    last.locator("summary").click()
    [(read, saved)] = claude_server.query(
        "SELECT SUM(cache_read_tokens), SUM(cache_saved_usd) FROM runs_agentdayspend "
        "WHERE agent = 'shipping-quotes'"
    )
    assert read > 0
    expect(last.locator("dl.facts")).to_contain_text(re.compile(r"[1-9]\d* read / \d+ written"))
    screenshot(page, "run-fallback-and-cache")

    operator.goto("/")
    row = page.locator("#dashboard-costs tr.cost-row[data-agent='shipping-quotes']")
    amount = Decimal(str(saved)).quantize(Decimal("0.0001"))
    shown = f"-${-amount}" if amount < 0 else f"${amount}"
    expect(row.locator("td.cache-saved span")).to_have_text(shown)
    expect(page.locator("#cache-savings")).to_contain_text(
        f"Prompt caching cost ${-amount} more" if amount < 0 else f"Prompt caching saved {shown}"
    )
    expect(page.locator("#cache-savings")).to_contain_text(f"{read} tokens read from the cache")
    screenshot(page, "dashboard-cache-savings")
    assert operator.console_errors == []
