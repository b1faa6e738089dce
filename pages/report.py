"""Report: `pcf report`'s tables and charts for chosen runs, and its files to download."""

from __future__ import annotations

from functools import partial

import streamlit as st

from pages.shared import RUN_KEY, ensure_app_frame, require_dataset, session
from pcf.analysis.markdown import escape_markdown
from pcf.analysis.results import SIMULATED_NOTE
from pcf.reports.collect import collect_report
from pcf.reports.document import (
    Figure,
    Report,
    Table,
    build_report,
    default_report_runs,
    report_title,
)
from pcf.reports.render import REPORT_FILES, SIMULATED_TAG, page_frame, report_file
from pcf.store import Run, database_url, list_runs, run_version

RUNS_KEY = "report_runs"
SECTION_KEY = "section"
SEED = 0
DOWNLOAD_HELP = {"json": "Every table as records, for scripts (what `pcf report --out` writes)."}


@st.cache_resource(max_entries=8, show_spinner="Reading the runs' judgments…")
def build(database: str, names: tuple[str, ...], versions: tuple, _runs: list[Run]) -> Report:
    """The report of the chosen runs, rebuilt only when a run's calls change (``versions``);
    shared by every session (read only). ``_runs``, the runs ``names`` names, are not hashed."""
    with session() as s:
        data = collect_report(_runs, session=s)
    return build_report(data, title=report_title(names), seed=SEED)


def show(block: str | Table | Figure) -> None:
    """Draw one block of the report as the files print it."""
    if isinstance(block, str):
        st.markdown(escape_markdown(block))  # texts, titles, notes and cells hold run names
        return
    st.markdown(f"**{escape_markdown(block.title)}**")
    if isinstance(block, Table):
        st.table(page_frame(block.frame), hide_index=True)  # wraps: no column cut off
    else:
        st.altair_chart(block.chart)
    if block.note:
        st.caption(escape_markdown(block.note))
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
    if not set(st.session_state.get(RUNS_KEY, [None])) <= set(names):  # none, or another's
        st.session_state[RUNS_KEY] = default_report_runs(st.session_state.get(RUN_KEY), names)
    st.multiselect("Runs", names, key=RUNS_KEY, help="A study's runs are named STUDY/...")
    chosen = tuple(n for n in names if n in st.session_state[RUNS_KEY])
    if not chosen:
        st.info("Choose at least one run.")
        st.stop()
    picked = [r for r in runs if r.name in chosen]
    versions = tuple(run_version(r, session=s) for r in picked)

report = build(database_url(), chosen, versions, picked)
for column, (kind, mime) in zip(st.columns(3), REPORT_FILES.items(), strict=True):
    column.download_button(
        f"Download report.{kind}",
        partial(report_file, report, kind),  # written when clicked: charts take seconds
        file_name=f"report.{kind}",
        mime=mime,
        on_click="ignore",
        icon=":material/download:",
        help=DOWNLOAD_HELP.get(kind),
    )

if report.simulated:
    st.warning(f":material/science: **Simulated judge**: {SIMULATED_NOTE}.")
# One section at a time, in the address (?section=): only the open tab is drawn.
tabs = st.tabs(
    [escape_markdown(section.title) for section in report.sections],
    key=SECTION_KEY,
    bind="query-params",
)
for tab, section in zip(tabs, report.sections, strict=True):
    if tab.open:
        with tab:
            for block in section.blocks:
                show(block)
