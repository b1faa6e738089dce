"""Report: the tables and charts of `pcf report` for chosen runs, with report.md, report.html and
report.json to download."""

from __future__ import annotations

import streamlit as st

from pages.shared import RUN_KEY, ensure_app_frame, require_dataset, session
from pcf.analysis.markdown import escape_markdown
from pcf.analysis.results import SIMULATED_NOTE
from pcf.reports.collect import ReportData, collect_report
from pcf.reports.document import Figure, Report, Table, build_report, default_report_runs
from pcf.reports.render import SIMULATED_TAG, display_frame, report_texts
from pcf.store import database_url, get_run, list_runs, run_version

RUNS_KEY = "report_runs"
SEED = 0


@st.cache_data(max_entries=8, show_spinner="Reading the runs' judgments…")
def report_data(database: str, names: tuple[str, ...], versions: tuple) -> ReportData:
    """The report's data frames, recomputed only when a run's calls change (``versions``)."""
    with session() as s:
        return collect_report([get_run(name, session=s) for name in names], session=s)


@st.cache_data(max_entries=8, show_spinner="Rendering the report files…")
def report_files(database: str, names: tuple[str, ...], versions: tuple) -> tuple[str, str, str]:
    """``(report.md, report.html, report.json)`` of the chosen runs."""
    return report_texts(build(database, names, versions))


def build(database: str, names: tuple[str, ...], versions: tuple) -> Report:
    """The report of the chosen runs."""
    data = report_data(database, names, versions)
    return build_report(data, title=f"PCF report: {', '.join(names)}", seed=SEED)


def show(block: str | Table | Figure) -> None:
    """Draw one block of the report as the files print it."""
    if isinstance(block, str):
        st.write(block)
        return
    st.markdown(f"**{escape_markdown(block.title)}**")  # titles hold run names
    if isinstance(block, Table):
        st.table(display_frame(block.frame), hide_index=True)  # wraps: no column cut off
    else:
        st.altair_chart(block.chart)
    if block.note:
        st.caption(block.note)
    if block.simulated:
        st.caption(f":material/science: {SIMULATED_TAG}")


ensure_app_frame()
st.title("Report")
st.caption(
    "The report `pcf report` writes: main table, K table, weight table, paired changes, order "
    "instability, slot bias and the pairwise section, recomputed from stored judgments."
)

with session() as s:
    dataset = require_dataset(s)
    runs = list_runs(session=s, dataset_id=dataset.id)
    if not runs:
        st.info("No run on this dataset yet: start one on the Runs page.")
        st.stop()
    names = [r.name for r in runs]
    if not set(st.session_state.get(RUNS_KEY) or []) <= set(names):
        del st.session_state[RUNS_KEY]
    if RUNS_KEY not in st.session_state:
        st.session_state[RUNS_KEY] = default_report_runs(st.session_state.get(RUN_KEY), names)
    st.multiselect("Runs", names, key=RUNS_KEY, help="A study's runs are named STUDY/...")
    chosen = tuple(n for n in names if n in st.session_state[RUNS_KEY])
    if not chosen:
        st.info("Choose at least one run.")
        st.stop()
    versions = tuple(run_version(r, session=s) for r in runs if r.name in chosen)

database = database_url()
markdown, page, data = report_files(database, chosen, versions)
left, middle, right = st.columns(3)
left.download_button(
    "Download report.md",
    markdown,
    file_name="report.md",
    mime="text/markdown",
    on_click="ignore",
    icon=":material/download:",
)
middle.download_button(
    "Download report.html",
    page,
    file_name="report.html",
    mime="text/html",
    on_click="ignore",
    icon=":material/download:",
)
right.download_button(
    "Download report.json",
    data,
    file_name="report.json",
    mime="application/json",
    on_click="ignore",
    icon=":material/download:",
    help="Every table as records, for scripts (what `pcf report --out` writes).",
)

report = build(database, chosen, versions)
if report.simulated:
    st.warning(f":material/science: **Simulated judge**: {SIMULATED_NOTE}.")
for section in report.sections:
    st.subheader(escape_markdown(section.title))
    for block in section.blocks:
        show(block)
