"""A new server, as a reviewer meets it: the first request, links that hold, a save that moves
the next item into view, and the first screen of Review and Adjudicate on RewardBench 2 rows.

The database holds the demo and a second dataset: the first 120 RewardBench 2 Factuality rows
(``/work/shared/data/rewardbench2``, see its SOURCE.md) when they are there, else a copy of the
demo items; the RewardBench 2 screenshots skip without them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from pcf.analysis.results import analyse_run
from pcf.labelling.adjudications import by_priority
from pcf.store import current_labels, get_dataset, get_run
from tests.demo_database import copy_demo, drop_database, new_database
from tests.e2e import EXCEPTION, settle
from tests.e2e.conftest import (
    LOCAL_NAME,
    ROOT,
    name_local_person,
    open_tab,
    pcf,
    serve_app,
    served_session,
)

REWARDBENCH2 = Path("/work/shared/data/rewardbench2/factuality-first120.jsonl")
PAGE_TITLES = [
    "Overview",
    "Review",
    "Adjudicate",
    "Compare",
    "Resolve",
    "Team",
    "Runs",
    "Weights",
    "Report",
    "Import",
    "Members",
]
Screenshot = Callable[..., Path]


@pytest.fixture(scope="module")
def second(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str]]:
    """``(database URL, second dataset, its most doubtful item)``: the demo plus a second
    dataset with a simulated PCF run (K=7)."""
    url = new_database(tmp_path_factory.mktemp("first-load"))
    copy_demo(url, command=True)
    if REWARDBENCH2.exists():
        name = "rb2"
        pcf(url, "import", "rewardbench2", str(REWARDBENCH2), "--name", name)
    else:
        name = "second"
        pcf(url, "import", "jsonl", str(ROOT / "data" / "demo" / "items.jsonl"), "--name", name)
    pcf(url, "judge", name, "--protocol", "pcf", "--k", "7", "--name", f"{name}-pcf")
    name_local_person(url)
    with served_session(url) as s:
        table = analyse_run(get_run(f"{name}-pcf", session=s), session=s).table
    yield url, name, str(by_priority(table)["item_id"].iloc[0])
    drop_database(url)


@pytest.fixture(scope="module")
def served(second: tuple[str, str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app on that database, one server for this module's later tests."""
    with serve_app(second[0], tmp_path_factory.mktemp("served") / "server.log") as base:
        yield base


def main(tab: Page) -> Locator:
    return tab.get_by_test_id("stMain")


def sidebar(tab: Page) -> Locator:
    return tab.get_by_test_id("stSidebar")


def assert_the_apps_frame(tab: Page) -> None:
    """No exception box; the sidebar holds the admin's ten pages (no helper module, no legacy
    entry page) and who is signed in."""
    expect(tab.locator(EXCEPTION)).to_have_count(0)
    links = sidebar(tab).get_by_test_id("stSidebarNav").get_by_role("link")
    expect(links).to_have_count(len(PAGE_TITLES))
    for link, title in zip(links.all(), PAGE_TITLES, strict=True):
        expect(link).to_have_text(re.compile(rf"{title}$"))
    expect(sidebar(tab).get_by_text(re.compile(r"^(common|app|shared)$"))).to_have_count(0)
    expect(sidebar(tab).get_by_text(f"{LOCAL_NAME} · admin")).to_be_visible()


def open_item(tab: Page, path: str, item: str) -> None:
    """Open ``path`` and wait for the Review page to draw ``item``."""
    tab.goto(path)
    expect(main(tab).get_by_role("heading", name=f"Item {item}", exact=True)).to_be_visible()
    settle(tab)


def test_the_first_request_to_a_new_server_is_the_overview(
    browser: Browser, second: tuple[str, str, str], tmp_path: Path
):
    with serve_app(second[0], tmp_path / "server.log") as base, open_tab(browser, base) as tab:
        tab.goto("/")
        expect(main(tab).get_by_role("heading", name="Overview", exact=True)).to_be_visible()
        expect(main(tab).get_by_role("heading", name="Run demo-strong-bias-pcf")).to_be_visible()
        settle(tab)
        assert_the_apps_frame(tab)


def test_a_deep_link_first_opens_its_item_of_another_dataset_and_a_reload_keeps_it(
    browser: Browser, second: tuple[str, str, str], tmp_path: Path
):
    url, dataset, item = second
    with serve_app(url, tmp_path / "server.log") as base, open_tab(browser, base) as tab:
        open_item(tab, f"/review?dataset={dataset}&item={item}", item)
        assert_the_apps_frame(tab)
        expect(sidebar(tab).get_by_role("combobox", name="Dataset")).to_have_value(dataset)
        encoded = "|".join(map(re.escape, {item, quote(item, safe="")}))
        expect(tab).to_have_url(re.compile(rf"/review\?.*item=({encoded})(&|$)"))

        tab.reload()
        open_item(tab, tab.url, item)
        assert_the_apps_frame(tab)
        expect(sidebar(tab).get_by_role("combobox", name="Dataset")).to_have_value(dataset)


def test_the_local_name_is_asked_once_and_no_key_or_address_changes_it(
    browser: Browser, tmp_path: Path
):
    url = new_database(tmp_path)
    copy_demo(url, command=True)
    with serve_app(url, tmp_path / "server.log") as base, open_tab(browser, base) as tab:
        tab.goto("/adjudicate?annotator=bob")
        dialog = tab.get_by_role("dialog")
        expect(dialog.get_by_text("Who is working here?")).to_be_visible()
        dialog.get_by_role("textbox", name="Your name").fill("Ana")
        dialog.get_by_role("textbox", name="Your name").press("Enter")
        expect(dialog).to_have_count(0)
        expect(sidebar(tab).get_by_text("Ana · admin")).to_be_visible()
        settle(tab)
        heading = main(tab).get_by_role("heading", name=re.compile(r"^Item "))
        expect(heading).to_be_visible()
        item = heading.inner_text().removeprefix("Item ")
        main(tab).get_by_role("heading", name="Adjudicate").click()
        tab.keyboard.press("1")  # one key labels the item, as the person named in the dialog
        expect(main(tab).get_by_text(f"Saved your label for item {item}")).to_be_visible()
        settle(tab)
        expect(sidebar(tab).get_by_text("Ana · admin")).to_be_visible()

        tab.goto("/?annotator=mallory")
        expect(main(tab).get_by_role("heading", name="Overview", exact=True)).to_be_visible()
        expect(tab.get_by_role("dialog")).to_have_count(0)
        expect(sidebar(tab).get_by_text("Ana · admin")).to_be_visible()
    with served_session(url) as s:
        labels = current_labels(get_dataset("demo", session=s).id, session=s)
    drop_database(url)
    assert list(zip(labels["item_key"], labels["annotator"], strict=True)) == [(item, "Ana")]


def scroll_to_bottom(tab: Page) -> None:
    """Scroll the app's main area to its end, where a long item leaves the reader."""
    main(tab).evaluate("area => area.scrollTo(0, area.scrollHeight)")


def test_after_labelling_with_a_key_the_next_items_prompt_is_in_view(
    browser: Browser, second: tuple[str, str, str], served: str
):
    dataset = second[1]
    with open_tab(browser, served) as tab:
        tab.goto(f"/adjudicate?dataset={dataset}")
        heading = main(tab).get_by_role("heading", name=re.compile(r"^Item "))
        expect(heading).to_be_visible()
        settle(tab)
        first = heading.inner_text()
        saved = main(tab).get_by_text(f"Saved your label for item {first.removeprefix('Item ')}")
        main(tab).get_by_role("heading", name="Adjudicate").click()  # the keys reach the page
        scroll_to_bottom(tab)
        tab.keyboard.press("1")  # one key saves and opens the next item

        expect(saved).to_be_visible()
        expect(heading).not_to_have_text(first)
        settle(tab)
        expect(main(tab).get_by_role("heading", name="Prompt")).to_be_in_viewport()
        expect(saved).to_be_in_viewport()


def test_review_and_adjudicate_show_why_in_the_first_screen(
    browser: Browser, second: tuple[str, str, str], served: str, screenshot: Screenshot
):
    _, dataset, item = second
    if dataset != "rb2":
        pytest.skip(f"{REWARDBENCH2} is missing: no RewardBench 2 rows to look at")
    with open_tab(browser, served) as tab:
        open_item(tab, f"/review?dataset={dataset}&item={item}", item)
        expect(main(tab).get_by_text("PCF winner:")).to_be_in_viewport()
        expect(main(tab).get_by_text("order_unstable", exact=True)).to_be_in_viewport()
        heatmap = main(tab).get_by_test_id("stVegaLiteChart").first
        expect(heatmap.locator("canvas, svg").first).to_be_visible()
        expect(heatmap).to_be_in_viewport(ratio=0.9)
        expect(main(tab).get_by_role("button", name=re.compile("Next"))).to_be_visible()
        print(screenshot(tab, f"review-{dataset}-first-screen", first_screen=True))

        tab.goto(f"/adjudicate?dataset={dataset}&label={item}")
        expect(main(tab).get_by_role("heading", name=f"Item {item}", exact=True)).to_be_visible()
        settle(tab)
        # lazily drawn widgets are in
        expect(main(tab).get_by_role("radiogroup", name="Confidence")).to_be_visible()
        expect(main(tab).get_by_text("Plain text", exact=True)).to_be_visible()
        print(screenshot(tab, f"adjudicate-{dataset}-first-screen", first_screen=True))
        expect(main(tab).get_by_role("heading", name="Prompt")).to_be_in_viewport()
        first_candidate = main(tab).get_by_role("button", name=re.compile(r"^Candidate 1(?!\d)"))
        expect(first_candidate).to_be_in_viewport()
