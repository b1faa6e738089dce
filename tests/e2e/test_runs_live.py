"""The Runs page while a run is live: a run started from the page shows finished, in the page
and the sidebar, without a reload; the tables fit a laptop's screen."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from pcf.store import get_dataset, list_runs
from tests.demo_database import drop_database, new_database
from tests.e2e import EXCEPTION, settle
from tests.e2e.conftest import (
    ROOT,
    TIMEOUT_MS,
    name_local_person,
    open_tab,
    pcf,
    serve_app,
    served_session,
)
from tests.wire_server import Scripted, WireRequest, WireServer

Screenshot = Callable[..., Path]
LISTWISE = json.dumps(
    {
        "candidates": [
            {"key": k, "factuality": 9 - i, "hallucination_risk": 0.1, "rationale": "ok"}
            for i, k in enumerate("ABCD")
        ],
        "ranking": list("ABCD"),
        "confidence": 0.8,
    }
)


LAPTOP = {"width": 1280, "height": 800}
CUT = """() => [...document.querySelectorAll('[data-testid=stMain] .stMarkdownEllipsis')]
    .filter(e => e.scrollWidth > e.clientWidth).map(e => e.textContent)"""
"""The texts Streamlit cuts with an ellipsis (metric labels and values) in the main area."""


def assert_nothing_cut(tab: Page) -> None:
    """No metric of the page is cut."""
    assert tab.evaluate(CUT) == []


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A database with one dataset (the demo's items) and no run yet: its URL."""
    url = new_database(tmp_path_factory.mktemp("runs-live"))
    pcf(url, "import", "jsonl", str(ROOT / "data" / "demo" / "items.jsonl"), "--name", "fresh")
    name_local_person(url)
    yield url
    drop_database(url)


@pytest.fixture(scope="module")
def fresh(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app on that database: its base URL."""
    with serve_app(database, tmp_path_factory.mktemp("served") / "server.log") as base:
        yield base


def held_answers() -> tuple[threading.Event, threading.Event, Callable[[WireRequest], Scripted]]:
    """``(asked, released, responder)``: the responder sets ``asked`` and answers once
    ``released`` is set (a hang guard bounds the wait)."""
    released, asked = threading.Event(), threading.Event()

    def held(request: WireRequest) -> Scripted:
        asked.set()
        released.wait(TIMEOUT_MS / 1000)
        return Scripted.answer(LISTWISE)

    return asked, released, held


def test_a_run_started_on_the_page_shows_finished_without_a_reload(
    browser: Browser, fresh: str, screenshot: Screenshot
):
    asked, released, held = held_answers()
    with WireServer(held) as wire, open_tab(browser, fresh) as tab:
        tab.set_viewport_size(LAPTOP)
        tab.goto("/runs")
        main, side = tab.get_by_test_id("stMain"), tab.get_by_test_id("stSidebar")
        expect(main.get_by_text("No run on this dataset yet")).to_be_visible()
        expect(side.get_by_text("No run on this dataset yet")).to_be_visible()
        settle(tab)
        main.get_by_role("textbox", name="Model").fill("openai-compatible/held")
        main.get_by_role("textbox", name="Base URL (optional)").fill(wire.openai_base_url)
        main.get_by_role("textbox", name="Base URL (optional)").press("Enter")
        settle(tab)
        expect(main.get_by_text("Output tokens")).to_be_visible()
        assert_nothing_cut(tab)  # the estimate of 52 items x K=7, 270,000 tokens and more
        main.get_by_role("combobox", name="Protocol").click()
        tab.get_by_role("option", name="direct").click()
        settle(tab)
        main.get_by_role("spinbutton", name="Items (0 = all)").fill("2")
        main.get_by_role("spinbutton", name="Items (0 = all)").press("Enter")
        settle(tab)
        main.get_by_role("button", name="Start run").click()
        assert asked.wait(TIMEOUT_MS / 1000), "the run sent no request"
        expect(main.get_by_text(re.compile(r"— (starting|running)$"))).to_be_visible()
        settle(tab)
        released.set()
        expect(main.get_by_text(re.compile(r"— finished$"))).to_be_visible()
        expect(side.get_by_role("combobox", name="Run")).to_be_visible()
        expect(main.get_by_text("No run on this dataset yet")).to_have_count(0)
        expect(side.get_by_text("No run on this dataset yet")).to_have_count(0)
        settle(tab)
        expect(tab.locator(EXCEPTION)).to_have_count(0)
        assert wire.request_count == 2
        assert_nothing_cut(tab)
        screenshot(tab, "runs-finished")


def test_a_run_judged_by_the_cli_shows_finished_on_an_open_page_without_a_reload(
    browser: Browser, database: str, fresh: str
):
    """A run another process judges (``pcf judge``), live when the page was drawn: the page
    looks again while its lease is live and redraws once the run has ended."""
    asked, released, held = held_answers()
    with WireServer(held) as wire, open_tab(browser, fresh) as tab:
        command = [sys.executable, "-m", "pcf", "judge", "fresh", "--protocol", "direct"]
        command += ["--model", "openai-compatible/cli", "--base-url", wire.openai_base_url]
        command += ["--limit", "1", "--name", "from-the-cli"]
        judge = subprocess.Popen(
            command,
            env={**os.environ, "PCF_DATABASE_URL": database},
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert asked.wait(TIMEOUT_MS / 1000), "pcf judge sent no request"
            tab.goto("/runs?run=from-the-cli")
            main, side = tab.get_by_test_id("stMain"), tab.get_by_test_id("stSidebar")
            cells = main.locator("[role=gridcell]")
            expect(cells.filter(has_text=re.compile(r"^running$"))).to_have_count(1)
            settle(tab)
            released.set()
            assert judge.wait(timeout=TIMEOUT_MS / 1000) == 0
        finally:
            released.set()
            if judge.poll() is None:
                judge.kill()
                judge.wait()
        expect(cells.filter(has_text=re.compile(r"^running$"))).to_have_count(0)
        with served_session(database) as s:
            runs = list_runs(session=s, dataset_id=get_dataset("fresh", session=s).id)
        finished = cells.filter(has_text=re.compile(r"^finished$"))
        expect(finished).to_have_count(len(runs))
        expect(side.get_by_role("combobox", name="Run")).to_have_value("from-the-cli")
        expect(tab.locator(EXCEPTION)).to_have_count(0)
