"""Local mode in Chromium: the one local person's name is asked once and no keypress changes it.

The last release took the annotator from a text field bound to the address: typing a name,
Enter, then the shortcut ``1`` made it "annie1", and every later label was saved under that.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect
from sqlmodel import select

from pcf.store import Adjudication, local_member
from tests.demo_database import drop_database, new_database
from tests.e2e import EXCEPTION, keys_ready, settle
from tests.e2e.conftest import ROOT, open_tab, pcf, serve_app, served_session

DEMO_ITEMS = ROOT / "data" / "demo" / "items.jsonl"


@pytest.fixture
def unnamed_url(tmp_path: Path) -> Iterator[str]:
    """A database holding the demo's items and nobody's name yet, served by the app."""
    url = new_database(tmp_path)
    pcf(url, "import", "jsonl", str(DEMO_ITEMS), "--name", "demo")
    with serve_app(url, tmp_path / "server.log") as app:
        yield app, url
    drop_database(url)


def test_the_local_name_is_kept_whatever_is_typed_after_it(
    browser: Browser, unnamed_url, screenshot
):
    app, url = unnamed_url
    with open_tab(browser, app) as tab:
        tab.goto("/adjudicate")
        dialog = tab.get_by_role("dialog")
        expect(dialog.get_by_text("Who is working here?")).to_be_visible()
        # No menu until the person is known: a new server showed Streamlit's list of the files
        # in pages/ ("app, adjudicate, compare...") behind the dialog.
        expect(tab.get_by_test_id("stSidebarNav")).to_have_count(0)
        screenshot(tab, "local_name_dialog", first_screen=True)
        dialog.get_by_role("textbox", name="Your name").click()
        tab.keyboard.type("annie")
        tab.keyboard.press("Enter")
        for key in "1s12":  # the old bug: shortcuts typed right after Enter joined the name
            tab.keyboard.press(key)
        expect(dialog).to_have_count(0)
        settle(tab)
        expect(tab.locator(EXCEPTION)).to_have_count(0)
        tab.reload()
        expect(tab.get_by_role("heading", name="Adjudicate")).to_be_visible()
        menu = tab.get_by_test_id("stSidebarNav")
        expect(menu.get_by_text("Adjudicate", exact=True)).to_be_visible()
        expect(menu.get_by_text("app", exact=True)).to_have_count(0)
        expect(tab.get_by_role("dialog")).to_have_count(0)  # asked once, not again on reload
        keys_ready(tab)
        for key in "12":  # one key labels the item on screen and opens the next
            heading = tab.get_by_role("heading", name=re.compile(r"^Item demo-"))
            expect(heading).to_be_visible()
            settle(tab)
            item = heading.inner_text().removeprefix("Item ")
            tab.get_by_role("heading", name="Adjudicate").click()  # out of any field
            tab.keyboard.press(key)
            expect(tab.get_by_text(f"Saved your label for item {item}")).to_be_visible()

    with served_session(url) as session:
        member = local_member(session=session)
        annotators = set(session.exec(select(Adjudication.annotator)).all())
    assert member is not None
    assert member.email == "annie"
    assert annotators == {"annie"}  # the labels typed after it were saved, all as annie
