"""Stored names are inert everywhere: a dataset, a run, an annotator, tags and notes named with
an image, a link and raw HTML render nothing live on any page, nor in report.md or report.html;
a candidate's address is never a live link.

Every text a page hands to Streamlit's Markdown (bodies, captions, alerts, labels, help, radio
options, st.table cells) is rendered by Streamlit's own Markdown libraries
(:class:`~tests.markdown_renderer.StreamlitRenderer`), which report every link, image and raw
HTML node they would make.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlmodel import Session
from streamlit.testing.v1 import AppTest

from pages.shared import PAGES
from pcf.access import operator
from pcf.items import Candidate, Item
from pcf.labelling.membership import set_local_name
from pcf.reports.collect import collect_report
from pcf.reports.document import build_report
from pcf.reports.render import render, render_charts
from pcf.runs.manage import judge_run
from pcf.runs.spec import RunSpec
from pcf.store import add_adjudication, get_run, import_items, load_items
from tests.app import APP, LOCAL_NAME, open_page
from tests.html_tables import html_tables
from tests.markdown_renderer import StreamlitRenderer

HOST = "127.0.0.1:9"  # a beacon's address: nothing may link to it or load from it
HOSTILE = f"![x](http://{HOST}/beacon) [l](http://{HOST}/link) <img src=http://{HOST}/h>"
DATASET = f"data {HOSTILE}"
RUN = f"run {HOSTILE}"
OTHER_RUN = f"other {HOSTILE}"  # Overview offers it as "the same items, another judge"
ANNOTATOR = f"ann {HOSTILE}"
CANDIDATE = f"See http://{HOST}/candidate and www.example.invalid for the answer."
LIVE = {"link", "image", "linkReference", "imageReference", "definition", "html"}
"""Nodes of the rendered Markdown that link, load or are raw HTML."""


@pytest.fixture
def hostile(db: Session) -> None:
    """A dataset and two simulated runs with hostile names, and two annotators (one with a
    hostile name, tags and notes) who disagree on each item."""
    items = [
        Item(f"q{i}", f"Question {i}?", (Candidate("a", CANDIDATE), Candidate("b", "No.")), "a")
        for i in range(3)
    ]
    found = import_items(items, session=db, name=DATASET, fmt="jsonl")
    for item in load_items(found.id, session=db):
        db_id = item.metadata["db_id"]
        add_adjudication(db_id, session=db, annotator=LOCAL_NAME, choice="a")
        add_adjudication(
            db_id, session=db, annotator=ANNOTATOR, choice="b", tags=[HOSTILE], notes=HOSTILE
        )
    db.commit()
    for run in (RUN, OTHER_RUN):
        judge_run(RunSpec(DATASET, run, k=2), session=db, actor=operator())


def markdown_sources(node: Any) -> Iterator[str]:
    """Every text of an AppTest element tree that Streamlit renders as Markdown (st.html is the
    page's own script)."""
    proto = getattr(node, "proto", None)
    kind = getattr(node, "type", "")
    if kind == "table":
        frame = node.value
        yield from (str(column) for column in frame.columns)
        yield from (str(cell) for cell in frame.to_numpy().ravel())
    elif proto is not None and kind not in ("text", "code", "json", "exception", "html"):
        yield from _strings(proto, radio=kind == "radio")
    for child in getattr(node, "children", {}).values():
        yield from markdown_sources(child)


def _strings(message: Any, *, radio: bool) -> Iterator[str]:
    """The Markdown fields of a protobuf message and of the messages inside it."""
    for descriptor, value in message.ListFields():
        values = [value] if isinstance(value, str) or hasattr(value, "ListFields") else value
        if descriptor.message_type is not None:
            for inner in values:
                yield from _strings(inner, radio=radio)
        elif descriptor.name in ("body", "label", "help") or (
            radio and descriptor.name == "options"
        ):
            yield from values


def live_parts(streamlit: StreamlitRenderer, texts: list[str]) -> list[tuple[str, list[str]]]:
    """The texts whose rendering links, loads or holds raw HTML, with what it does."""
    found = []
    for text in texts:
        live = [node for node in streamlit.render(text).active if node[0] in LIVE]
        if live:
            found.append((text, live))
    return found


@pytest.mark.parametrize(
    "page", [path.removeprefix("pages/").removesuffix(".py") for path in PAGES]
)
def test_hostile_names_render_nothing_live_on_any_page(db, hostile, streamlit, page):
    set_local_name(LOCAL_NAME, session=db)
    db.commit()
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.session_state["dataset"], at.session_state["run"] = DATASET, RUN
    at = open_page(at.run(), page)
    assert not at.exception
    texts = list(markdown_sources(at._tree))
    if page not in ("members", "imports"):  # emails and the audit log; a form with no names
        assert any(HOST in text for text in texts)  # a hostile name is on the page
    assert live_parts(streamlit, texts) == []


def test_hostile_names_are_inert_in_report_md_and_report_html(db, hostile, streamlit):
    report = build_report(collect_report([get_run(RUN, session=db)], session=db), title=RUN)
    charts = render_charts(report, png=False)
    markdown = render(report, charts, "md")
    assert "127.0.0.1" in markdown
    assert [node for node in streamlit.render(markdown).active if node[0] in LIVE] == []
    page = html_tables(render(report, charts, "html"))
    assert page.tags["a"] == page.tags["script"] == 0
    sources = [value for key, value in page.attrs if key in ("src", "href")]
    assert all(src.startswith("data:image/svg+xml;base64,") for src in sources)
