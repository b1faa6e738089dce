"""The whole app in Chromium: every page, a deep link, keyboard labelling, inert candidate text."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Locator, Page, expect
from sqlmodel import col, select

from pcf.labelling.adjudications import display_order
from pcf.store import Adjudication, ItemRow, load_item
from tests.e2e import EXCEPTION, settle
from tests.e2e.conftest import LOCAL_NAME, served_session

Screenshot = Callable[[Page, str], Path]


def main(page: Page) -> Locator:
    """The page's main area."""
    return page.get_by_test_id("stMain")


def sidebar(page: Page) -> Locator:
    """The shared sidebar: page links, who is signed in, dataset and run."""
    return page.get_by_test_id("stSidebar")


DEFAULT_RUN = "demo-strong-bias-pcf"  # the run the sidebar opens the demo on

# Per page: something its script draws only after reading the demo database.
PAGES: dict[str, Callable[[Page], Locator]] = {
    "Overview": lambda page: main(page).get_by_role("heading", name=f"Run {DEFAULT_RUN}"),
    "Review": lambda page: main(page).get_by_role("heading", name=re.compile(r"^Item demo-\d+")),
    "Adjudicate": lambda page: main(page).get_by_role("heading", name=re.compile(r"^Item demo-")),
    "Compare": lambda page: main(page).get_by_text(f"Run {DEFAULT_RUN} on dataset demo"),
    "Runs": lambda page: main(page).get_by_role("heading", name="Start a run"),
    "Weights": lambda page: main(page).get_by_role("heading", name=f"Playground: {DEFAULT_RUN}"),
    "Report": lambda page: main(page).get_by_role("button", name="Download report.md"),
    "Members": lambda page: main(page).get_by_role("heading", name="Audit log"),
}


def open_url(page: Page, path: str, title: str) -> None:
    """Load ``path`` and wait for the page's title and the end of its first run."""
    page.goto(path)
    expect(main(page).get_by_role("heading", name=title, exact=True)).to_be_visible()
    settle(page)


def assert_no_exception(page: Page) -> None:
    """No Streamlit exception box on the page."""
    expect(page.locator(EXCEPTION)).to_have_count(0)


@pytest.mark.parametrize("title", list(PAGES))
def test_every_page_opens_from_the_sidebar(
    page: Page, app_url: str, screenshot: Screenshot, title: str
):
    start, start_title = ("/", "Overview") if title != "Overview" else ("/runs", "Runs")
    open_url(page, start, start_title)

    sidebar(page).get_by_role("link", name=re.compile(rf"{title}$")).click()
    expect(main(page).get_by_role("heading", name=title, exact=True)).to_be_visible()
    expect(PAGES[title](page)).to_be_visible()
    settle(page)

    assert_no_exception(page)
    path = "" if title == "Overview" else title.lower()
    expect(page).to_have_url(re.compile(rf"^{re.escape(app_url)}/{path}(\?.*)?$"))
    expect(sidebar(page).get_by_text(f"{LOCAL_NAME} · admin")).to_be_visible()
    print(screenshot(page, f"page-{title.lower()}"))


def test_a_deep_link_opens_the_item_inside_the_app(page: Page, screenshot: Screenshot):
    open_url(page, "/review?item=demo-013", "Review")

    expect(main(page).get_by_role("heading", name="Item demo-013")).to_be_visible()
    expect(main(page).get_by_text("Label this item")).to_be_visible()
    expect(sidebar(page).get_by_text(f"{LOCAL_NAME} · admin")).to_be_visible()
    expect(sidebar(page).get_by_role("link", name=re.compile("Review$"))).to_be_visible()
    expect(page).to_have_url(re.compile(r"/review\?item=demo-013$"))
    assert_no_exception(page)
    print(screenshot(page, "deep-link-review-demo-013"))


def test_candidate_markup_stays_inert_text(page: Page, screenshot: Screenshot, dialogs: list[str]):
    open_url(page, "/review?item=demo-052", "Review")
    expect(main(page).get_by_role("heading", name="Item demo-052")).to_be_visible()
    settle(page)

    candidates = main(page).get_by_test_id("stMarkdownContainer").filter(has_text="alert(1)")
    expect(candidates).to_have_count(1)  # the one candidate, rendered as inert Markdown
    expect(candidates).to_contain_text("<script>alert(1)</script>")
    expect(candidates).to_contain_text("http://example.invalid/x.png")
    expect(candidates.locator("a, img, script, iframe")).to_have_count(0)

    main(page).get_by_text("Plain text", exact=True).click()
    settle(page)
    plain = main(page).get_by_test_id("stText").filter(has_text="<script>alert(1)</script>")
    expect(plain).to_have_count(1)
    expect(plain).to_contain_text("![x](http://example.invalid/x.png)")

    raw = main(page).get_by_test_id("stExpander").filter(has_text="Raw prompt")
    raw.click()  # the judge's raw prompt quotes every candidate
    expect(raw.get_by_test_id("stCode").get_by_text("<script>alert(1)</script>")).to_be_visible()
    expect(page.locator("img[src^='http://example.invalid']")).to_have_count(0)
    expect(page.locator("script", has_text="alert(1)")).to_have_count(0)
    assert_no_exception(page)
    print(screenshot(page, "inert-review-demo-052"))
    assert dialogs == []


def saved_labels(url: str, annotator: str) -> list[tuple[str, str, str]]:
    """``(item key, choice, notes)`` of the annotator's labels, oldest first."""
    with served_session(url) as s:
        rows = s.exec(
            select(ItemRow.item_key, Adjudication.choice, Adjudication.notes)
            .join(ItemRow, col(ItemRow.id) == Adjudication.item_id)
            .where(Adjudication.annotator == annotator)
            .order_by(col(Adjudication.id))
        )
        return [tuple(row) for row in rows]


@pytest.mark.db  # the browser journey of the PostgreSQL pass: a label saved through the app
def test_an_item_is_labelled_with_the_keyboard(page: Page, screenshot: Screenshot, demo_url: str):
    annotator = LOCAL_NAME
    open_url(page, "/adjudicate", "Adjudicate")
    heading = main(page).get_by_role("heading", name=re.compile(r"^Item demo-\d+"))
    expect(heading).to_be_visible()
    settle(page)
    item_key = heading.inner_text().removeprefix("Item ")
    notes = main(page).get_by_role("textbox", name="Notes")
    notes.fill("checked 2 sources")  # digits typed in a text field label nothing
    main(page).get_by_role("heading", name="Prompt").click()  # out of the text field
    settle(page)
    expect(heading).to_have_text(f"Item {item_key}")
    assert saved_labels(demo_url, annotator) == []
    page.keyboard.press("1")  # one key: saved, and the next item opens

    expect(main(page).get_by_text(f"Saved your label for item {item_key}")).to_be_visible()
    with served_session(demo_url) as s:
        db_id = s.exec(select(ItemRow.id).where(ItemRow.item_key == item_key)).one()
        first_shown = display_order(load_item(db_id, session=s), annotator)[0]
    assert saved_labels(demo_url, annotator) == [(item_key, first_shown, "checked 2 sources")]
    expect(heading).not_to_have_text(f"Item {item_key}")
    settle(page)
    assert_no_exception(page)
    print(screenshot(page, "adjudicate-keyboard-saved"))
