"""Import in the app, in Chromium: an admin on an empty database uploads a file (the upload
widget AppTest cannot drive): one with a bad row imports nothing and names the row; a sound one
appears in the sidebar."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from pcf.store import get_dataset, load_items
from tests.demo_database import drop_database, new_database
from tests.e2e import EXCEPTION, settle
from tests.e2e.conftest import name_local_person, open_tab, serve_app, served_session
from tests.shared_data import RB2


def test_an_admin_uploads_a_file_and_the_dataset_appears(
    browser: Browser, tmp_path: Path, screenshot
):
    url = new_database(tmp_path)
    name_local_person(url)
    upload = tmp_path / "two-questions.jsonl"
    rows = [
        {
            "item_id": f"q{n}",
            "prompt": f"Question {n}?",
            "candidates": [{"id": "a", "text": "Yes."}, {"id": "b", "text": "No."}],
        }
        for n in (1, 2)
    ]
    upload.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    (tmp_path / "bad").mkdir()
    bad = tmp_path / "bad" / upload.name
    bad.write_text(upload.read_text().replace('"Question 2?"', "null"), encoding="utf-8")
    try:
        with serve_app(url, tmp_path / "server.log") as app, open_tab(browser, app) as tab:
            tab.goto("/")
            tab.get_by_role("link", name="Import a dataset").click()  # the empty database's hint
            expect(tab.get_by_role("heading", name="Import")).to_be_visible()
            form = tab.get_by_test_id("stForm").first
            form.locator("input[type=file]").set_input_files(bad)
            expect(form.get_by_text("two-questions.jsonl")).to_be_visible()
            form.get_by_role("button", name="Import").click()
            error = tab.get_by_test_id("stAlertContentError")
            expect(error).to_contain_text("Nothing imported, 1 problem(s)")
            expect(error).to_contain_text("two-questions.jsonl:2: prompt: missing")
            screenshot(tab, "import_a_bad_row", first_screen=True)
            form.locator("input[type=file]").set_input_files(upload)
            form.get_by_role("button", name="Import").click()
            expect(tab.get_by_text("Imported dataset two-questions (2 items)")).to_be_visible()
            expect(form.get_by_text("two-questions.jsonl")).to_have_count(0)  # not imported twice
            sidebar = tab.get_by_test_id("stSidebar")
            expect(sidebar.get_by_role("combobox", name="Dataset")).to_have_value("two-questions")
            settle(tab)
            expect(tab.locator(EXCEPTION)).to_have_count(0)
        with served_session(url) as session:
            dataset = get_dataset("two-questions", session=session)
            assert dataset is not None
            assert [item.item_id for item in load_items(dataset.id, session=session)] == [
                "q1",
                "q2",
            ]
    finally:
        drop_database(url)


@pytest.mark.skipif(not RB2.exists(), reason="../shared/data is absent")
def test_the_rewardbench2_file_is_recognised_and_a_failed_try_keeps_it(
    browser: Browser, tmp_path: Path, screenshot
):
    """Read as items.jsonl the shipped RewardBench 2 file fails and is named for what it is; the
    upload stays, and with the default format (its columns) it imports its 120 items."""
    url = new_database(tmp_path)
    name_local_person(url)
    try:
        with serve_app(url, tmp_path / "server.log") as app, open_tab(browser, app) as tab:
            tab.goto("/imports")
            form = tab.get_by_test_id("stForm").first
            form.locator("input[type=file]").set_input_files(RB2)
            kept = form.get_by_role("button", name=f"Remove {RB2.name}")
            expect(kept).to_be_visible()
            format_box = form.get_by_test_id("stSelectbox")
            format_box.click()
            tab.get_by_role("option", name="items.jsonl (jsonl)").click()
            form.get_by_role("button", name="Import").click()
            error = tab.get_by_test_id("stAlertContentError")
            expect(error).to_contain_text("Nothing imported, 240 problem(s)")
            expect(error).to_contain_text("columns fit RewardBench 2: choose rewardbench2")
            expect(kept).to_be_visible()  # the upload stays for the next try
            format_box.click()
            tab.get_by_role("option", name="recognised by its columns").click()
            form.get_by_role("button", name="Import").click()  # not uploaded again
            expect(
                tab.get_by_text(
                    "Imported dataset factuality-first120 (120 items), read as RewardBench 2, "
                    "recognised by its columns"
                )
            ).to_be_visible()
            screenshot(tab, "import_rewardbench2_recognised", first_screen=True)
            settle(tab)
            expect(tab.locator(EXCEPTION)).to_have_count(0)
        with served_session(url) as session:
            dataset = get_dataset("factuality-first120", session=session)
            assert dataset is not None
            assert (dataset.format, dataset.n_items) == ("rewardbench2", 120)
    finally:
        drop_database(url)
