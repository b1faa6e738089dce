"""Resolve on two long answers (two essays): the gold form is in the first screen, and the
difference is aligned by sentence."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Browser, expect

from pcf.store import add_adjudication, get_dataset, load_items
from tests.demo_database import drop_database, new_database
from tests.e2e import EXCEPTION, settle
from tests.e2e.conftest import VIEWPORT, name_local_person, open_tab, pcf, serve_app, served_session

Screenshot = Callable[..., Path]


def essay(claim: str, year: int) -> str:
    """About 4,000 characters in 30 sentences, most shared by both essays, some not."""
    parts = []
    for i in range(30):
        if i % 5 == 0:
            parts.append(f"In paragraph {i} the author argues that {claim} mattered most.")
        elif i % 7 == 0:
            parts.append(f"The records of {year + i} show the harvest failed in the north.")
        else:
            parts.append(f"Sentence {i} describes the river trade and the towns along its banks.")
        if i % 6 == 5:
            parts.append("\n\n")
    return " ".join(parts)


def test_the_gold_form_of_two_long_answers_is_in_the_first_screen(
    browser: Browser, tmp_path: Path, screenshot: Screenshot
):
    items = tmp_path / "essays.jsonl"
    candidates = [
        {"id": "first", "text": essay("the weather", 1650)},
        {"id": "second", "text": essay("the grain price", 1660)},
    ]
    row = {"item_id": "essay-1", "prompt": "Why did the towns decline?", "candidates": candidates}
    items.write_text(json.dumps(row) + "\n")
    url = new_database(tmp_path)
    pcf(url, "import", "jsonl", str(items), "--name", "essays")
    name_local_person(url)
    with served_session(url) as s:
        (item,) = load_items(get_dataset("essays", session=s).id, session=s)
        for who, choice in (("ann@x.org", "first"), ("bob@x.org", "second")):
            add_adjudication(item.metadata["db_id"], session=s, annotator=who, choice=choice)
        s.commit()
    try:
        with serve_app(url, tmp_path / "server.log") as base, open_tab(browser, base) as tab:
            tab.goto("/resolve?dataset=essays")
            main = tab.get_by_test_id("stMain")
            expect(main.get_by_role("heading", name="Item essay-1")).to_be_visible()
            expect(main.locator(".pcf-diff mark").first).to_be_attached()
            settle(tab)
            expect(tab.locator(EXCEPTION)).to_have_count(0)
            for part in (
                main.get_by_role("radiogroup"),
                main.get_by_role("textbox", name="Reason"),
                main.get_by_role("button", name="Set gold"),
            ):
                box = part.bounding_box()
                assert box is not None
                assert box["y"] >= 0, box
                assert box["y"] + box["height"] <= VIEWPORT["height"], box
            changed = main.locator(".pcf-diff mark").count()
            words = sum(len(c["text"].split()) for c in candidates)
            assert 0 < changed < words / 10  # a few words marked, not nearly all
            screenshot(tab, "resolve-long-first-screen", first_screen=True)
            main.get_by_text("Show whole answers").click()
            settle(tab)
            screenshot(tab, "resolve-long-whole")
    finally:
        drop_database(url)
