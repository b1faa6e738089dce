"""The Report page on the demo database: the report's tables (its files to download are
written when clicked: ``tests/e2e/test_report_downloads.py``)."""

from __future__ import annotations

from collections.abc import Iterator

from sqlmodel import Session
from streamlit.testing.v1 import AppTest

from pcf.analysis.markdown import escape_markdown
from pcf.analysis.results import run_summary
from pcf.runs.study import DEMO_RUNS
from pcf.store import get_run
from tests.app import open_page

CHARTS = 1 + 3 * sum(
    spec.protocol == "pcf" for spec in DEMO_RUNS
)  # paired changes; per PCF run: instability, slots, triage
"""Paired changes, then per PCF run its instability histogram and its slot-share chart."""


def each_section(at: AppTest) -> Iterator[AppTest]:
    """The page with each of its section tabs open in turn (one at a time, by the address)."""
    for label in [tab.label for tab in at.tabs]:
        at.query_params["section"] = label
        at.run()
        assert not at.exception
        yield at


def test_report_page_shows_the_main_table_of_the_demo_runs(app, db: Session):
    at = open_page(app, "report")
    assert not at.exception
    assert at.multiselect(key="report_runs").value == [spec.run_name for spec in DEMO_RUNS]
    assert len(at.tabs) == 7  # the sections; only the open one is drawn
    tables, texts, charts = [], [], 0
    for shown in each_section(at):
        tables += [t.value for t in shown.table]
        texts += [m.value for m in shown.markdown]
        charts += len(shown.get("vega_lite_chart"))
    stats = run_summary(get_run("demo-pcf", session=db), session=db)["accuracy"]
    row = next(frame for frame in tables if "PCF %" in frame.columns).iloc[0].to_dict()
    low, high = stats["ci_points"]
    assert row["run"] == escape_markdown("demo-pcf")  # st.table renders Markdown: names escaped
    assert row["model"] == escape_markdown("simulated/sim-primacy")
    assert row["N"] == str(stats["n"])
    assert row["direct %"] == f"{100 * stats['direct_accuracy']:.1f}"
    assert row["PCF %"] == f"{100 * stats['method_accuracy']:.1f}"
    assert (row["improved"], row["regressed"], row["same"]) == tuple(
        str(stats[k]) for k in ("improved", "regressed", "same")
    )
    assert row["McNemar p"] == f"{stats['mcnemar_p']:.3g}"
    assert (row["CI low"], row["CI high"]) == (f"{low:+.1f}", f"{high:+.1f}")
    titles = " ".join(texts)
    for title in ("K table", "Weight table", "Paired changes", "Slot bias", "order instability"):
        assert title in titles
    assert any("Simulated judge" in w.value for w in at.warning)
    assert charts == CHARTS


def test_choosing_only_the_direct_run_says_there_is_nothing_to_compare(app):
    at = open_page(app, "report")
    at.multiselect(key="report_runs").set_value(["demo-direct"]).run()
    assert not at.exception
    texts = [m.value for shown in each_section(at) for m in shown.markdown]
    assert any("nothing to compare with direct" in text for text in texts)
    at.multiselect(key="report_runs").set_value([]).run()
    assert any("at least one run" in i.value for i in at.info)
