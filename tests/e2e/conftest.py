"""The browser suite: Debian's Chromium, driven by Playwright, against a live agentops.

One `manage.py up` subprocess serves the whole suite: daphne and a real Celery worker. The
topology follows the test session: embedded (in-process worker on the memory transport, its own
SQLite file) by default, or Postgres + Redis when DATABASE_URL and REDIS_URL are set (as in CI's
second pass). The tests read what the server wrote straight from its database.

Each test gets fresh browser contexts (one per user), so sessions never leak between tests.
`playwright install` is not used: Chromium comes from the system (apt-get install chromium).
Without it the browser tests are skipped and the run's summary says so in one loud line;
with AGENTOPS_REQUIRE_BROWSER=1 (CI) they fail instead.
"""

import os
import shutil
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
import redis
from playwright.sync_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Page,
    Playwright,
    WebSocket,
    expect,
    sync_playwright,
)
from psycopg import sql as pgsql

from tests.livesupport import ROOT, UpServer, kill_up, start_up, stop_up
from tests.support.droppable_proxy import DroppableProxy

PASSWORD = "e2e-demo-password"
# Which calls the gate policy samples is then a function of the call: a test can choose
# arguments that are (or are not) sampled (tests/e2e/test_learning_policy.py).
SAMPLING_SEED = "e2e"
# Every run saves its screenshots under var/ (ignored by git); with
# AGENTOPS_UPDATE_SCREENSHOTS=1 they replace the docs' pictures in docs/screenshots (every
# picture the docs show is one taken here: tests/test_docs.py, .ci/run).
SCREENSHOTS = (
    ROOT / "docs" / "screenshots"
    if os.environ.get("AGENTOPS_UPDATE_SCREENSHOTS")
    else ROOT / "var" / "screenshots"
)
# Debian's chromium; override with AGENTOPS_CHROMIUM for another system browser.
CHROMIUM_CANDIDATES = ("chromium", "chromium-browser")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-quic",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
]
# Generous for a 2-core machine shared with other work; a healthy run needs well under a second.
LIVE_TIMEOUT_MS = 15_000

expect.set_options(timeout=LIVE_TIMEOUT_MS)


INSTALL_CHROMIUM = "sudo apt-get install -y chromium"
# Set in CI (.ci/run): a missing browser fails the browser tests instead of skipping them.
REQUIRE_BROWSER = "AGENTOPS_REQUIRE_BROWSER"
missing_browser_key = pytest.StashKey[tuple[int, str, bool]]()


def find_chromium() -> tuple[str, str]:
    """(path, "") of the browser to drive, or ("", what is missing)."""
    explicit = os.environ.get("AGENTOPS_CHROMIUM")
    if explicit:
        if Path(explicit).is_file():
            return explicit, ""
        return "", f"Chromium not found at AGENTOPS_CHROMIUM={explicit}"
    for name in CHROMIUM_CANDIDATES:
        found = shutil.which(name)
        if found:
            return found, ""
    return "", f"Chromium not found ({' or '.join(CHROMIUM_CANDIDATES)} on PATH)"


def browser_required() -> bool:
    return os.environ.get(REQUIRE_BROWSER, "").lower() in ("1", "true", "yes")


@pytest.hookimpl(trylast=True)  # after -m / -k deselection: only the browser tests that run
def pytest_collection_modifyitems(config, items):
    browser_tests = [item for item in items if item.get_closest_marker("e2e")]
    missing = find_chromium()[1] if browser_tests else ""
    if not missing:
        return
    config.stash[missing_browser_key] = (len(browser_tests), missing, browser_required())
    if browser_required():
        return  # the browser fixture fails each of them, saying why
    skip = pytest.mark.skip(reason=f"{missing}; install it: {INSTALL_CHROMIUM}")
    for item in browser_tests:
        item.add_marker(skip)


def pytest_terminal_summary(terminalreporter, config):
    if missing_browser_key not in config.stash:
        return
    count, missing, required = config.stash[missing_browser_key]
    outcome = f"FAILED ({REQUIRE_BROWSER} is set)" if required else "SKIPPED"
    terminalreporter.write_sep(
        "!",
        f"{count} browser tests (tests/e2e) {outcome}: {missing}. "
        f"Install it with `{INSTALL_CHROMIUM}` (Debian/Ubuntu)",
        red=True,
        bold=True,
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    # A failing browser test shows what the server said meanwhile (tracebacks, 4xx/5xx).
    report = yield
    up = running_servers[0].up if running_servers else None
    if report.failed and up is not None:
        report.sections.append(("agentops server output (tail)", "".join(up.lines[-80:])))
    return report


# The suite's server, for failure reports and diagnostics.
running_servers: list["LiveServer"] = []


# --- the live server ----------------------------------------------------------------------------
@dataclass
class LiveServer:
    """The running agentops and read-only access to its database (SQLite or Postgres)."""

    up: UpServer
    sqlite_path: Path | None = None
    postgres_url: str = ""

    @property
    def shop_path(self) -> Path:
        """The demo shop the agents' tools read (SQLite in both topologies); tests may seed it."""
        return self.up.var_dir / "shop.sqlite3"

    @property
    def url(self) -> str:
        return self.up.url

    @property
    def topology(self) -> str:
        return "Postgres + Redis" if self.postgres_url else "embedded (SQLite)"

    def query(self, sql: str, *params) -> list[tuple]:
        """Read the server's database. `sql` uses ? placeholders; ids go through `key()`."""
        if self.postgres_url:
            with psycopg.connect(self.postgres_url, autocommit=True) as db:
                return db.execute(sql.replace("?", "%s"), params).fetchall()
        # WAL: readers never block the server's writers.
        uri = f"file:{self.sqlite_path}?mode=ro"
        with closing(sqlite3.connect(uri, uri=True, timeout=10)) as db:
            return db.execute(sql, params).fetchall()

    def key(self, value: str) -> uuid.UUID | str:
        """A UUID as this database stores it (SQLite: 32 hex digits; Postgres: uuid)."""
        return uuid.UUID(value) if self.postgres_url else uuid.UUID(value).hex

    def run_status(self, run_id: str) -> str:
        return self.query("SELECT status FROM runs_run WHERE id = ?", self.key(run_id))[0][0]

    def seconds_since_update(self, run_id: str) -> float:
        """How long ago the run's row last changed (its status among it)."""
        (updated,) = self.query("SELECT updated_at FROM runs_run WHERE id = ?", self.key(run_id))[0]
        if isinstance(updated, str):  # SQLite stores text, in UTC
            updated = datetime.fromisoformat(updated).replace(tzinfo=UTC)
        return (datetime.now(UTC) - updated).total_seconds()

    def step_seqs(self, run_id: str) -> list[int]:
        rows = self.query(
            "SELECT seq FROM runs_step WHERE run_id = ? ORDER BY seq", self.key(run_id)
        )
        return [seq for (seq,) in rows]

    def pending_approval(self, run_id: str, *, tool: str = "issue_refund") -> str:
        """The id of the run's pending approval for `tool`, waiting for its gate to open."""
        deadline = time.monotonic() + LIVE_TIMEOUT_MS / 1000
        while True:
            rows = self.query(
                "SELECT id FROM approvals_approval WHERE run_id = ? AND tool = ? "
                "AND status = 'pending'",
                self.key(run_id),
                tool,
            )
            if rows or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert len(rows) == 1, f"expected one pending {tool} approval for run {run_id}: {rows}"
        return str(uuid.UUID(str(rows[0][0])))

    def wait_for_status(self, run_id: str, status: str) -> None:
        deadline = time.monotonic() + LIVE_TIMEOUT_MS / 1000
        while self.run_status(run_id) != status and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.run_status(run_id) == status

    def refunds(self, run_id: str) -> list[tuple]:
        """(order_id, amount, reason) of the refunds this run issued."""
        rows = self.query(
            "SELECT order_id, amount, reason FROM demo_refund WHERE run_id = ? ORDER BY id",
            self.key(run_id),
        )
        return [(order, Decimal(str(amount)), reason) for order, amount, reason in rows]


def services_from_env() -> tuple[str, str] | None:
    """(DATABASE_URL, REDIS_URL) when this test session runs against Postgres + Redis."""
    database, redis = os.environ.get("DATABASE_URL", ""), os.environ.get("REDIS_URL", "")
    if database.startswith(("postgres://", "postgresql://")) and redis:
        return database, redis
    return None


def fresh_postgres_database(url: str, suffix: str = "_browser") -> str:
    """A new, empty database next to the one in `url`; returns its URL."""
    parts = urlsplit(url)
    name = parts.path.lstrip("/") + suffix
    with psycopg.connect(parts._replace(path="/postgres").geturl(), autocommit=True) as db:
        db.execute(
            pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(pgsql.Identifier(name))
        )
        db.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(name)))
    return parts._replace(path=f"/{name}").geturl()


def drop_postgres_database(url: str) -> None:
    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    with psycopg.connect(parts._replace(path="/postgres").geturl(), autocommit=True) as db:
        db.execute(
            pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(pgsql.Identifier(name))
        )


def redis_of_the_server(url: str, offset: int = 8) -> str:
    """A Redis database of the live server's own, `offset` numbers from this worker's, emptied
    first. On the worker's database the server's in-process Celery worker would take the
    tasks of the service tests this worker runs while the server lives (a real worker's run,
    found nowhere in the server's database, dropped: the test's run stays queued), and their
    workers the server's. Emptied: tasks an earlier run left queued there (thousands, from a
    bench or an interrupted suite) were worked through before the test's run, which stayed
    queued past its wait."""
    parts = urlsplit(url)
    number = (int(parts.path.strip("/") or 0) + offset) % 16
    server_url = parts._replace(path=f"/{number}").geturl()
    with closing(redis.Redis.from_url(server_url)) as connection:
        connection.flushdb()
    return server_url


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> Iterator[LiveServer]:
    """One live agentops for the suite, in the topology of this test session.

    Embedded by default: daphne with the Celery worker in-process, its own SQLite file.
    When the session has DATABASE_URL (Postgres) and REDIS_URL, the server uses them instead
    (`up --with-worker`: the worker consumes from Redis, the channel layer is Redis), with a
    fresh database of its own next to the test database, dropped afterwards.
    """
    var_dir = tmp_path_factory.mktemp("e2e-var")
    services = services_from_env()
    if services:
        # One per pytest-xdist worker that runs browser tests (--dist loadfile spreads
        # their files), each with its own server.
        worker = os.environ.get("PYTEST_XDIST_WORKER", "")
        database = fresh_postgres_database(services[0], f"_browser{worker and '_' + worker}")
        up = start_up(
            var_dir,
            "--with-worker",
            AGENTOPS_DEMO_PASSWORD=PASSWORD,
            AGENTOPS_GATE_SAMPLING_SEED=SAMPLING_SEED,
            DATABASE_URL=database,
            REDIS_URL=redis_of_the_server(services[1]),
        )
        live = LiveServer(up=up, postgres_url=database)
    else:
        up = start_up(
            var_dir, AGENTOPS_DEMO_PASSWORD=PASSWORD, AGENTOPS_GATE_SAMPLING_SEED=SAMPLING_SEED
        )
        live = LiveServer(up=up, sqlite_path=var_dir / "agentops.sqlite3")
    running_servers.append(live)
    try:
        yield live
        stop_up(up)
    finally:
        running_servers.remove(live)
        kill_up(up)
        if live.postgres_url:
            drop_postgres_database(live.postgres_url)


@pytest.fixture
def proxy(server) -> Iterator[DroppableProxy]:
    relay = DroppableProxy(int(server.url.rsplit(":", 1)[1]))
    yield relay
    relay.close()


# --- the browser --------------------------------------------------------------------------------
# Package scope, not session: Playwright's sync API keeps an event loop marked running on the
# main thread while it is started, so tests collected after this package (asyncio.run, anyio)
# would find one. It stops when the last browser test is done.
@pytest.fixture(scope="package")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="package")
def browser(playwright) -> Iterator[Browser]:
    executable, missing = find_chromium()
    if not executable:
        pytest.fail(
            f"{missing}: the browser tests need Debian's Chromium. Install it with "
            f"`{INSTALL_CHROMIUM}`, or point AGENTOPS_CHROMIUM at a Chromium binary "
            "(`playwright install` is not used)."
        )
    browser = playwright.chromium.launch(
        executable_path=executable, headless=True, args=CHROMIUM_ARGS
    )
    yield browser
    browser.close()


@dataclass
class Session:
    """One user's browser context, with what the page said in the console and asked for."""

    context: BrowserContext
    page: Page
    console_errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    sockets: list[WebSocket] = field(default_factory=list)
    frames: list[tuple[WebSocket, str]] = field(default_factory=list)
    # What the next confirm() dialogs are answered (True: OK); dismissed when empty.
    dialog_answers: list[bool] = field(default_factory=list)

    def on_dialog(self, dialog) -> None:
        self.dialogs.append(dialog.message)
        if self.dialog_answers and self.dialog_answers.pop(0):
            dialog.accept()
        else:
            dialog.dismiss()

    def sockets_to(self, path: str) -> list[WebSocket]:
        """The WebSockets this page opened to `path` (reconnects included), oldest first."""
        return [ws for ws in self.sockets if path in ws.url]

    def frames_from(self, ws: WebSocket) -> list[str]:
        """What the server sent on `ws`, in order."""
        return [payload for socket_, payload in self.frames if socket_ is ws]

    def on_websocket(self, ws: WebSocket) -> None:
        self.sockets.append(ws)
        ws.on("framereceived", lambda payload: self.frames.append((ws, str(payload))))

    def settle(self) -> None:
        """Return once what the page was given has had its effects here: htmx processes
        swapped content synchronously, so the requests it made (a script's fetch, an image,
        an htmx trigger) and what it logged came before a marker request the page issues
        now, and the browser reports them in that order."""
        marker = f"/healthz?settled={uuid.uuid4().hex}"
        with self.page.expect_request(lambda request: marker in request.url):
            self.page.evaluate("url => { fetch(url); }", marker)

    def on_console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.console_errors.append(f"{message.text} ({message.location.get('url', '')})")

    def goto(self, path: str) -> None:
        response = self.page.goto(path)
        assert response is not None and response.ok, (
            f"GET {path}: {response.status if response else 'no response'}"
        )

    def mark_document(self) -> None:
        """Tag the current document; `assert_same_document` proves no reload happened since."""
        self.page.evaluate("window.__e2eMark = 'not reloaded'")

    def assert_same_document(self) -> None:
        assert self.page.evaluate("window.__e2eMark") == "not reloaded", "the page was reloaded"


@pytest.fixture
def login(browser, server) -> Iterator[Callable[[str], Session]]:
    """login("operator") -> a logged-in Session in a fresh browser context."""
    contexts: list[BrowserContext] = []

    def _login(username: str, *, via: str = "") -> Session:
        # via: another address of the same server (the droppable proxy).
        context = browser.new_context(
            base_url=via or server.url, viewport={"width": 1280, "height": 860}
        )
        contexts.append(context)
        page = context.new_page()
        session = Session(context=context, page=page)
        page.on("console", session.on_console)
        page.on("pageerror", lambda exc: session.console_errors.append(f"pageerror: {exc}"))
        page.on("dialog", session.on_dialog)
        page.on("request", lambda r: session.requests.append(r.url))
        page.on("websocket", session.on_websocket)
        session.goto("/accounts/login/")
        page.fill("#id_username", username)
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(lambda url: "/accounts/login/" not in url)
        return session

    yield _login
    for context in contexts:
        context.close()


def screenshot(page: Page, name: str) -> None:
    """<name>.png in SCREENSHOTS: a picture of each page the suite visits."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
