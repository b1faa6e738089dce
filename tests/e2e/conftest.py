"""Browser fixtures: the demo database, ``streamlit run app.py`` on a free port, and Chromium.
A served app's database lives as long as its server, so tests set it up and check what the app
wrote through :func:`served_session`, not the per-test fixtures of ``tests/conftest.py``.

Without Debian's Chromium the tests skip, except where the ``CI`` variable is set: there a
missing browser is an error, as CI (``.ci/run``) installs it. The fixtures live as long as this
package's tests: Playwright's sync API keeps an event loop running in the main thread, where
later tests call ``asyncio.run``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Dialog, Page, expect, sync_playwright
from sqlmodel import Session

from pcf.labelling.membership import set_local_name
from pcf.store import get_engine
from tests.demo_database import copy_demo, drop_database, new_database
from tests.factories import pcf_process
from tests.served_app import ROOT, in_ci, serve_app

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = ROOT / "screenshots"
VIEWPORT = {"width": 1400, "height": 1000}
MAX_SCREENSHOT_HEIGHT = 8000
TIMEOUT_MS = 120_000
"""How long a browser action or check waits: a bound against a hang, not a speed test (a new
session's first Adjudicate run took 15 s on the two-core machine at load 10)."""
SAVED: list[Path] = []
LOCAL_NAME = "Local Tester"
"""The local person of the served demo (local mode: an admin), named as the name dialog would."""

expect.set_options(timeout=TIMEOUT_MS)


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    """Debian's Chromium, headless, launched once for all browser tests."""
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium)"
        if in_ci():
            pytest.fail(f"{message}; CI is set, so the browser tests must run", pytrace=False)
        pytest.skip(message)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="package")
def demo_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a demo database (a SQLite file, or on the tests' PostgreSQL server), built by
    ``pcf demo``, its local person named.

    Built in a child process: the demo's simulated runs use ``asyncio.run``, which cannot run
    inside the event loop of Playwright's sync API.
    """
    url = new_database(tmp_path_factory.mktemp("e2e"))
    copy_demo(url, command=True)
    name_local_person(url)
    yield url
    drop_database(url)


def pcf(url: str, *args: str) -> None:
    """A ``pcf`` command on the database at ``url``, in a child process (the simulated runs use
    ``asyncio.run``, which cannot run inside Playwright's event loop); a failure fails the test."""
    done = pcf_process(*args, env={"PCF_DATABASE_URL": url}, cwd=ROOT)
    if done.returncode:
        pytest.fail(f"pcf {' '.join(args)} failed with {done.returncode}:\n{done.stderr}")


@contextmanager
def served_session(url: str) -> Iterator[Session]:
    """A session on the database at ``url``, which a served app uses: to set it up or check what
    the app wrote. No connection of this process stays open on it afterwards."""
    engine = get_engine(url)
    try:
        with Session(engine, expire_on_commit=False) as session:
            yield session
    finally:
        engine.dispose()


def name_local_person(url: str) -> None:
    """Give the database's local person the name :data:`LOCAL_NAME`."""
    with served_session(url) as session:
        set_local_name(LOCAL_NAME, session=session)
        session.commit()


@pytest.fixture(scope="package")
def app_url(demo_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app served on the demo database for the whole package: its base URL."""
    with serve_app(demo_url, tmp_path_factory.mktemp("streamlit") / "server.log") as url:
        yield url


@contextmanager
def open_tab(
    browser: Browser,
    base_url: str,
    dialogs: list[str] | None = None,
    headers: dict[str, str] | None = None,
) -> Iterator[Page]:
    """A tab in a fresh browser context (a new Streamlit session) on ``base_url``, sending
    ``headers`` with every request; JavaScript dialogs are dismissed and their messages kept in
    ``dialogs``."""
    context = browser.new_context(base_url=base_url, viewport=VIEWPORT, extra_http_headers=headers)
    context.set_default_timeout(TIMEOUT_MS)
    tab = context.new_page()

    def dismiss(dialog: Dialog) -> None:
        if dialogs is not None:
            dialogs.append(dialog.message)
        dialog.dismiss()

    tab.on("dialog", dismiss)
    try:
        yield tab
    finally:
        context.close()


@pytest.fixture
def dialogs() -> list[str]:
    """Messages of the JavaScript dialogs (``alert``...) the page opened, each dismissed."""
    return []


@pytest.fixture
def page(browser: Browser, app_url: str, dialogs: list[str]) -> Iterator[Page]:
    """A page in a fresh browser context (a new Streamlit session) on the served app."""
    with open_tab(browser, app_url, dialogs) as tab:
        yield tab


@pytest.fixture(scope="package")
def screenshot() -> Callable[[Page, str], Path]:
    """Save the whole page (the app scrolls inside its main area) as ``screenshots/NAME.png``;
    with ``first_screen=True`` only what a 1400x1000 window shows."""
    SCREENSHOTS.mkdir(exist_ok=True)

    def save(tab: Page, name: str, *, first_screen: bool = False) -> Path:
        path = SCREENSHOTS / f"{name}.png"
        if first_screen:
            tab.screenshot(path=path, animations="disabled")
            SAVED.append(path)
            return path
        height = tab.evaluate("document.querySelector('[data-testid=stMain]').scrollHeight")
        tab.set_viewport_size({**VIEWPORT, "height": min(max(height, 1000), MAX_SCREENSHOT_HEIGHT)})
        tab.screenshot(path=path, animations="disabled")
        tab.set_viewport_size(VIEWPORT)
        SAVED.append(path)
        return path

    return save


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say where the browser screenshots are, when this run took any."""
    if SAVED:
        terminalreporter.write_line(f"browser screenshots ({len(SAVED)}): {SCREENSHOTS}")
