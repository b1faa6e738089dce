"""Hostile Markdown in the real renderer: no request reaches a beacon, no live link, no script,
on Overview, Review, Adjudicate and Compare; and a huge answer does not stop the server answering.

A beacon (a local HTTP server on port 0 that records every request it gets) is the host of every
address in the hostile dataset (``tests/e2e/hostile_items.py``): the issue's bypasses, the
property test's worst finds and every piece it draws from, in prompts, candidates, item and
candidate ids, dataset, run and annotator names, notes and tags.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlencode

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.demo_database import drop_database, new_database
from tests.e2e import EXCEPTION, settle
from tests.e2e.conftest import ROOT, open_tab, serve_app
from tests.e2e.hostile_items import HUGE_CHARACTERS, names

Screenshot = Callable[..., Path]
PAINTED = "() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))"
"""Resolves once the page has been laid out and painted: any image or font it uses is asked for."""
ELEMENTS_TO = """host => [...document.querySelectorAll(
    'a[href], img, iframe, video, audio, source, link[href], object, embed, image, use'
)].map(e => [e.tagName, e.href?.baseVal ?? e.href ?? e.src ?? e.data ?? ''])
  .filter(([, url]) => url && new URL(url, location.href).host === host)"""
"""Every element of the page that links to or loads from ``host``."""


class Beacon(ThreadingHTTPServer):
    """A local HTTP server that records every request it gets (and answers 204); ``issued``
    is every address a tab asked for (the browser's own record, kept by :func:`tab`)."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.issued: list[str] = []
        beacon = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                beacon.requests.append(self.path)
                self.send_response(204)
                self.end_headers()

            def do_POST(self) -> None:
                self.do_GET()

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"


@pytest.fixture(scope="module")
def beacon() -> Iterator[Beacon]:
    server = Beacon()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def hostile_url(beacon: Beacon, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The served app on a database holding the hostile and the huge datasets."""
    folder = tmp_path_factory.mktemp("hostile")
    database = new_database(folder)
    built = subprocess.run(
        [sys.executable, "-m", "tests.e2e.hostile_items", database, beacon.host],
        cwd=ROOT,
        env={**os.environ, "PCF_DATABASE_URL": database},
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode:
        pytest.fail(f"building the hostile datasets failed:\n{built.stderr}")
    with serve_app(database, folder / "server.log") as url:
        yield url
    drop_database(database)


@pytest.fixture
def tab(browser: Browser, hostile_url: str, beacon: Beacon, dialogs: list[str]) -> Iterator[Page]:
    """A new session on the hostile app; the beacon's record starts empty."""
    beacon.requests.clear()
    beacon.issued.clear()
    with open_tab(browser, hostile_url, dialogs) as page:
        page.add_init_script("window.__ran = []")
        page.on("request", lambda request: beacon.issued.append(request.url))
        yield page


PARIS = re.compile(r"^Paris\.$")


def visit(page: Page, path: str, **query: str) -> None:
    page.goto(f"{path}?{urlencode(query)}")
    expect(page.get_by_test_id("stMain").get_by_role("heading").first).to_be_visible()
    settle(page)


def assert_inert(page: Page, beacon: Beacon, dialogs: list[str]) -> None:
    """Nothing asked the beacon or reached it, nothing links to or loads from it, no script
    ran."""
    page.evaluate(PAINTED)
    expect(page.locator(EXCEPTION)).to_have_count(0)
    assert [url for url in beacon.issued if beacon.host in url] == []
    assert page.evaluate(ELEMENTS_TO, beacon.host) == []
    markdown = page.locator("[data-testid=stMarkdownContainer]")
    assert markdown.locator("img").count() == 0
    assert markdown.locator("a[href]:not([href^='#'])").count() == 0
    assert beacon.requests == []
    assert dialogs == []
    assert page.evaluate("window.__ran") == []


def test_review_renders_hostile_items_inert(
    tab: Page, beacon: Beacon, dialogs: list[str], screenshot: Screenshot
):
    named = names(beacon.host)
    for number in (1, 2):
        visit(
            tab,
            "/review",
            dataset=named["dataset"],
            run=named["run"],
            item=f"{named['item']} {number}",
        )
        # The candidate's paragraph; the raw prompt's code (in its expander) has the text too.
        expect(tab.get_by_role("paragraph").filter(has_text=PARIS)).to_be_visible()
        assert_inert(tab, beacon, dialogs)
        print(screenshot(tab, f"hostile-review-{number}"))
    tab.get_by_test_id("stExpander").filter(has_text="Raw prompt").click()
    settle(tab)
    assert_inert(tab, beacon, dialogs)


def test_adjudicate_renders_hostile_items_inert(
    tab: Page, beacon: Beacon, dialogs: list[str], screenshot: Screenshot
):
    named = names(beacon.host)
    visit(tab, "/adjudicate", dataset=named["dataset"])
    expect(tab.get_by_role("button", name=re.compile(r"^Candidate 1(?!\d)"))).to_be_visible()
    tab.get_by_test_id("stExpander").filter(has_text="Guidelines").click()
    settle(tab)
    assert_inert(tab, beacon, dialogs)
    tab.get_by_text("Unblind: show the judge's decisions").click()  # and every label, with notes
    settle(tab)
    assert_inert(tab, beacon, dialogs)
    print(screenshot(tab, "hostile-adjudicate"))


def test_compare_renders_hostile_names_inert(
    tab: Page, beacon: Beacon, dialogs: list[str], screenshot: Screenshot
):
    named = names(beacon.host)
    visit(tab, "/compare", dataset=named["dataset"], run=named["run"])
    expect(tab.get_by_role("heading", name="Disagreements")).to_be_visible()
    expect(tab.get_by_test_id("stPageLink")).not_to_have_count(0)
    assert_inert(tab, beacon, dialogs)
    print(screenshot(tab, "hostile-compare"))


def test_overview_renders_hostile_run_names_inert(
    tab: Page, beacon: Beacon, dialogs: list[str], screenshot: Screenshot
):
    """The other run's name is on a button ("The same items, another judge"): it loaded its
    image twice a load."""
    named = names(beacon.host)
    visit(tab, "/", dataset=named["dataset"], run=named["run"])
    expect(tab.get_by_text("The same items, another judge")).to_be_visible()
    assert_inert(tab, beacon, dialogs)
    expect(tab.get_by_role("button", name=named["other run"])).to_be_visible()  # as stored
    print(screenshot(tab, "hostile-overview", first_screen=True))


def test_a_huge_answer_renders_its_head_then_whole_on_request(
    tab: Page, hostile_url: str, screenshot: Screenshot
):
    """Before, one Review load of a 100k-character line held the server for 88 s. Now the page
    renders the first 20,000 characters and, on Show all, the whole 200k-character line; the
    sanitiser's time is linear in the length, to 1M characters (tests/analysis/test_markdown.py;
    benchmarks/markdown_hostile.py measures it), and so is the browser's (a 1M line took 5x
    this one's time)."""
    visit(tab, "/review", dataset="huge", run="huge-pcf", item="huge")
    show_all = tab.get_by_role("button", name=f"Show all: {HUGE_CHARACTERS - 20_000:,} more")
    expect(show_all).to_be_visible()
    show_all.click()
    expect(show_all).to_have_count(0, timeout=600_000)  # the whole line is rendered
    settle(tab)
    expect(tab.locator(EXCEPTION)).to_have_count(0)
    print(screenshot(tab, "huge-answer-shown-whole", first_screen=True))
