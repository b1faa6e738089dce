"""In Chromium on the demo and 120 RewardBench 2 rows: one key labels an item and opens the next
at its top, no key is lost, whatever had the focus."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from sqlmodel import col, select

from pcf.store import Adjudication, ItemRow
from tests.demo_database import copy_demo, drop_database, new_database
from tests.e2e import EXCEPTION, keys_ready, settle
from tests.e2e.conftest import (
    LOCAL_NAME,
    VIEWPORT,
    name_local_person,
    open_tab,
    pcf,
    serve_app,
    served_session,
)
from tests.shared_data import RB2

pytestmark = pytest.mark.skipif(not RB2.exists(), reason=f"{RB2} is missing")

LABELS = 30
KEYS = ("1", "2", "3", "4", "0", "x")
LOST_AFTER_MS = 60_000  # a key after which no next item shows in a minute is lost
DRAWN = """(before) => {
    const fresh = (node) => node !== null && node.closest("[data-stale='true']") === null;
    const heading = [...document.querySelectorAll("[data-testid=stMain] h3")]
        .find((h) => h.innerText.startsWith("Item "));
    const boxes = [...document.querySelectorAll("[class*='st-key-adjudicate_candidate_']")];
    const prompt = document.querySelector(".st-key-adjudicate_prompt");
    if (!heading || !fresh(heading) || heading.innerText === before || !fresh(prompt)) {
        return null;
    }
    return boxes.length && boxes.every(fresh) ? heading.innerText : null;
}"""
"""The heading of the item on screen once a new item's heading, prompt and candidates are drawn
(none of them left over from the previous run), else null."""
FIRST_LINES = """() => {
    const firstLine = (box) => {
        const walker = document.createTreeWalker(box, NodeFilter.SHOW_TEXT,
            (n) => n.textContent.trim() ? NodeFilter.FILTER_ACCEPT : NodeFilter.FILTER_SKIP);
        const text = walker.nextNode();
        if (!text) return null;
        const range = document.createRange();
        range.setStart(text, 0);
        range.setEnd(text, Math.min(1, text.length));
        const rect = range.getBoundingClientRect();
        return {top: rect.top, bottom: rect.bottom, left: rect.left, right: rect.right};
    };
    const boxes = [".st-key-adjudicate_prompt",
        ...[...document.querySelectorAll("[class*='st-key-adjudicate_candidate_']")]
            .map((b) => "." + [...b.classList].find((c) => c.startsWith("st-key-")))];
    return boxes.map((selector) => [selector, firstLine(document.querySelector(selector))]);
}"""
"""For the prompt's box and each candidate's: where the first character of its text is drawn."""


@pytest.fixture(scope="module")
def rb2_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A database with the demo and the 120 RewardBench 2 rows (``rb2``, with a simulated PCF
    run)."""
    url = new_database(tmp_path_factory.mktemp("rb2"))
    copy_demo(url, command=True)
    pcf(url, "import", "rewardbench2", str(RB2), "--name", "rb2")
    pcf(url, "judge", "rb2", "--protocol", "pcf", "--k", "7", "--name", "rb2-pcf")
    name_local_person(url)
    yield url
    drop_database(url)


@pytest.fixture(scope="module")
def rb2_app(rb2_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app served on that database: its base URL."""
    with serve_app(rb2_url, tmp_path_factory.mktemp("rb2-server") / "server.log") as url:
        yield url


@pytest.fixture
def tab(browser: Browser, rb2_app: str) -> Iterator[Page]:
    """A tab in a new browser session on the served app (1400x1000)."""
    with open_tab(browser, rb2_app) as page:
        yield page


def main(page: Page):
    return page.get_by_test_id("stMain")


def wait_drawn(page: Page, before: str) -> str | None:
    """The heading of the next item once drawn, or None when none shows in a minute."""
    try:
        return page.wait_for_function(DRAWN, arg=before, timeout=LOST_AFTER_MS).json_value()
    except PlaywrightTimeout:
        return None


def labels_of(url: str, annotator: str) -> list[str]:
    """Keys of the items the annotator labelled, oldest label first."""
    with served_session(url) as s:
        return list(
            s.exec(
                select(ItemRow.item_key)
                .join(Adjudication, col(Adjudication.item_id) == ItemRow.id)
                .where(Adjudication.annotator == annotator)
                .order_by(col(Adjudication.id))
            )
        )


def open_labelling(page: Page) -> str:
    """Open Adjudicate on ``rb2``: the heading of the first item."""
    page.goto("/adjudicate?dataset=rb2")
    heading = wait_drawn(page, "")
    assert heading is not None
    keys_ready(page)
    return wait_drawn(page, "")


def test_no_key_is_lost_over_30_labels(tab: Page, rb2_url: str, tmp_path: Path):
    earlier = labels_of(rb2_url, LOCAL_NAME)
    heading = open_labelling(tab)
    shown, lost = [], 0
    for n in range(LABELS):
        shown.append(heading.removeprefix("Item "))
        while True:  # the next key as soon as the next item is drawn, as a quick person would
            tab.keyboard.press(KEYS[n % len(KEYS)])
            if (after := wait_drawn(tab, heading)) is not None:
                heading = after
                break
            lost += 1
    settle(tab)
    assert lost == 0
    assert (
        labels_of(rb2_url, LOCAL_NAME) == earlier + shown
    )  # one label per key, for the item on screen
    expect(tab.locator(EXCEPTION)).to_have_count(0)

    # A key sets no confidence: the export says it was not given, not a default value.
    pcf(rb2_url, "labels", "export", "rb2", "--out", str(tmp_path / "labels.jsonl"))
    exported = [json.loads(line) for line in (tmp_path / "labels.jsonl").read_text().splitlines()]
    keyed = [r for r in exported if r["annotator"] == LOCAL_NAME and r["item_id"] in shown]
    assert len(keyed) == LABELS
    assert [r["confidence"] for r in keyed] == [None] * LABELS


def test_after_a_save_the_prompt_and_every_candidate_start_in_view(tab: Page, screenshot):
    heading = open_labelling(tab)
    tab.keyboard.press("1")
    assert wait_drawn(tab, heading) is not None
    settle(tab)
    expect(
        main(tab).get_by_text(re.compile(r"^Saved your label for item Factuality:"))
    ).to_be_visible()
    lines = dict(tab.evaluate(FIRST_LINES))
    assert len(lines) == 5  # the prompt and the four candidates of a RewardBench 2 row
    for selector, line in lines.items():
        assert line is not None, f"{selector} shows no text"
        assert line["top"] >= 0, (selector, line)
        assert line["bottom"] <= VIEWPORT["height"], (selector, line)
        assert line["left"] >= 0, (selector, line)
        assert line["right"] <= VIEWPORT["width"], (selector, line)
    print(screenshot(tab, "adjudicate-rb2-after-save", first_screen=True))


def test_a_key_labels_after_a_click_on_a_confidence_the_queue_order_or_a_switch(
    tab: Page, rb2_url: str
):
    """Clicking a radio button or a switch puts the keyboard's focus on it and reruns the page:
    a number key pressed at once, while the item is drawn again, still labels it, once, with the
    confidence clicked before it."""
    earlier = labels_of(rb2_url, LOCAL_NAME)
    heading = open_labelling(tab)
    shown = []
    for control in ("0.75 · sure", "review priority", "Plain text"):
        main(tab).get_by_text(control, exact=True).click()  # a run starts: the key at once
        shown.append(heading.removeprefix("Item "))
        tab.keyboard.press("1")
        heading = wait_drawn(tab, heading)
        assert heading is not None, f"a key after a click on {control!r} labelled nothing"
        keys_ready(tab)
    settle(tab)
    assert labels_of(rb2_url, LOCAL_NAME) == earlier + shown
    with served_session(rb2_url) as s:
        confidences = s.exec(
            select(Adjudication.confidence).order_by(col(Adjudication.id).desc()).limit(3)
        ).all()
    assert confidences == [None, None, 0.75]
