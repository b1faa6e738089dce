"""The Report page on the demo database: the report's tables, and its three files to download."""

from __future__ import annotations

import json
from pathlib import PurePosixPath

import pytest
from sqlmodel import Session
from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage

from pcf.analysis.results import run_summary
from pcf.runs.study import DEMO_RUNS
from pcf.store import get_run
from tests.app import open_page
from tests.html_tables import html_tables

CHARTS = 1 + 3 * sum(
    spec.protocol == "pcf" for spec in DEMO_RUNS
)  # paired changes; per PCF run: instability, slots, triage
"""Paired changes, then per PCF run its instability histogram and its slot-share chart."""


@pytest.fixture
def downloads(monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    """Every file the app hands to the media storage (download buttons), by file id."""
    stored: dict[str, bytes] = {}
    original = MemoryMediaFileStorage.load_and_get_id

    def keep(self, path_or_data, mimetype, kind, filename=None):
        file_id = original(self, path_or_data, mimetype, kind, filename)
        stored[file_id] = path_or_data
        return file_id

    monkeypatch.setattr(MemoryMediaFileStorage, "load_and_get_id", keep)
    return stored


def download_data(at, downloads: dict[str, bytes]) -> dict[str, str]:
    """``{label: text}`` of the page's download buttons."""
    out = {}
    for button in at.get("download_button"):
        file_id = PurePosixPath(button.proto.url).stem
        data = downloads[file_id]
        out[button.proto.label] = data.decode("utf-8") if isinstance(data, bytes) else data
    return out


def main_row(at):
    frame = next(d.value for d in at.table if "PCF %" in d.value.columns)
    return frame.iloc[0].to_dict()


def test_report_page_shows_the_main_table_of_the_demo_runs(app, db: Session, downloads):
    at = open_page(app, "report")
    assert not at.exception
    assert at.multiselect(key="report_runs").value == [spec.run_name for spec in DEMO_RUNS]
    stats = run_summary(get_run("demo-pcf", session=db), session=db)["accuracy"]
    row = main_row(at)
    low, high = stats["ci_points"]
    assert row["run"] == "demo-pcf"
    assert row["model"] == "simulated/sim-primacy"
    assert row["N"] == str(stats["n"])
    assert row["direct %"] == f"{100 * stats['direct_accuracy']:.1f}"
    assert row["PCF %"] == f"{100 * stats['method_accuracy']:.1f}"
    assert (row["improved"], row["regressed"], row["same"]) == tuple(
        str(stats[k]) for k in ("improved", "regressed", "same")
    )
    assert row["McNemar p"] == f"{stats['mcnemar_p']:.3g}"
    assert (row["CI low"], row["CI high"]) == (f"{low:+.1f}", f"{high:+.1f}")
    titles = " ".join(m.value for m in at.markdown)
    for title in ("K table", "Weight table", "Paired changes", "Slot bias", "order instability"):
        assert title in titles
    assert any("Simulated judge" in w.value for w in at.warning)
    assert len(at.get("vega_lite_chart")) == CHARTS


def test_the_downloads_are_the_report_files(app, downloads):
    at = open_page(app, "report")
    files = download_data(at, downloads)
    assert set(files) == {f"Download report.{kind}" for kind in ("md", "html", "json")}
    markdown, page = files["Download report.md"], files["Download report.html"]
    data = json.loads(files["Download report.json"])
    row = main_row(at)
    assert data["simulated"] is True
    shown = next(d.value for d in at.table if "PCF %" in d.value.columns)
    assert [(r["run"], r["n"]) for r in data["tables"]["main"]] == [
        (run, int(n)) for run, n in zip(shown["run"], shown["N"], strict=True)
    ]
    assert markdown.startswith(f"# PCF report: {', '.join([spec.run_name for spec in DEMO_RUNS])}")
    assert f"| {' | '.join(row.values())} |" in markdown
    parsed = html_tables(page)
    assert list(row.values()) in parsed.rows
    assert "script" not in parsed.tags
    assert page.count("data:image/svg+xml;base64,") == CHARTS
    assert "http://" not in page.replace('xmlns="http://www.w3.org', "")


def test_choosing_only_the_direct_run_says_there_is_nothing_to_compare(app):
    at = open_page(app, "report")
    at.multiselect(key="report_runs").set_value(["demo-direct"]).run()
    assert not at.exception
    assert any("nothing to compare with direct" in m.value for m in at.markdown)
    at.multiselect(key="report_runs").set_value([]).run()
    assert any("at least one run" in i.value for i in at.info)
