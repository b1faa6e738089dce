"""The Report page's three files, downloaded in Chromium: written when clicked, each equal to
what the library writes for the runs shown."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from playwright.sync_api import Page, expect

from pcf.analysis.results import SIMULATED_NOTE
from pcf.reports.collect import collect_report
from pcf.reports.document import build_report, report_title
from pcf.reports.render import REPORT_FILES, report_file
from pcf.runs.study import DEMO_RUNS
from pcf.store import get_run
from tests.e2e import settle
from tests.e2e.conftest import served_session
from tests.e2e.test_app_browser import assert_no_exception, main, open_url
from tests.html_tables import html_tables

CHARTS = 1 + 3 * sum(spec.protocol == "pcf" for spec in DEMO_RUNS)
"""Paired changes, then per PCF run its instability histogram, slot shares and triage chart."""
TITLE = "# PCF report: "


def download(page: Page, kind: str, folder: Path) -> str:
    """Click ``Download report.KIND`` and return the file the browser received."""
    with page.expect_download() as started:
        main(page).get_by_role("button", name=f"Download report.{kind}").click()
    path = folder / f"report.{kind}"
    started.value.save_as(path)
    return path.read_text(encoding="utf-8")


def test_the_downloads_are_the_report_files_of_the_runs_shown(
    page: Page, demo_url: str, tmp_path: Path
):
    open_url(page, "/report", "Report")
    expect(main(page).get_by_role("button", name="Download report.md")).to_be_visible()
    settle(page)
    files = {kind: download(page, kind, tmp_path) for kind in REPORT_FILES}
    assert_no_exception(page)

    markdown, html, data = files["md"], files["html"], json.loads(files["json"])
    assert markdown.startswith(TITLE)
    names = markdown.splitlines()[0].removeprefix(TITLE).split(", ")
    assert names == [spec.run_name for spec in DEMO_RUNS]
    with served_session(demo_url) as s:
        report_data = collect_report([get_run(name, session=s) for name in names], session=s)
    report = build_report(report_data, title=report_title(names), seed=0)
    assert files == {kind: report_file(report, kind) for kind in REPORT_FILES}

    assert data["simulated"] is True
    pcf_runs = {spec.run_name for spec in DEMO_RUNS if spec.protocol == "pcf"}
    assert pcf_runs <= {row["run"] for row in data["tables"]["main"]}
    assert markdown.count(SIMULATED_NOTE) == 1  # the note once; the tables only point to it
    assert html.count(escape(SIMULATED_NOTE)) == 1
    parsed = html_tables(html)
    assert "script" not in parsed.tags
    assert html.count("data:image/svg+xml;base64,") == CHARTS
    assert "http://" not in html.replace('xmlns="http://www.w3.org', "")
    main_row = data["tables"]["main"][0]
    assert any(main_row["run"] in row for row in parsed.rows)
