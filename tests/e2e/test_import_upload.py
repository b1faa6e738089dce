"""Import in the app, in Chromium: an admin on an empty database uploads a file (the upload
widget AppTest cannot drive): one with a bad row imports nothing and names the row; a sound one
appears in the sidebar."""

from __future__ import annotations

import json
from pathlib import Path

from playwright.sync_api import Browser, expect

from pcf.store import get_dataset, load_items
from tests.demo_database import drop_database, new_database
from tests.e2e import EXCEPTION, settle
from tests.e2e.conftest import name_local_person, open_tab, serve_app, served_session


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
