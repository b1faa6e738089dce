"""What every page shares: the database engine, the sidebar choices, the simulated badge.

Pages read and write only through `pcf`; this module only connects them to Streamlit.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st
from sqlalchemy import Engine
from sqlmodel import Session
from streamlit.runtime.pages_manager import PagesManager

from pcf.analysis.results import SIMULATED_NOTE, RunAnalysis, analyse_run, is_simulated
from pcf.store import (
    DATABASE_URL_ENV,
    Dataset,
    Run,
    database_url,
    get_dataset,
    get_engine,
    get_run,
    get_run_by_id,
    list_datasets,
    list_runs,
    matching_item_keys,
    run_version,
)

# A `pages/` folder puts a new Streamlit server in its legacy folder-page mode until app.py's
# st.navigation runs; a deep link (/review?item=...) opened first would run the page alone,
# without the sidebar. This module is imported by app.py and every page, once per process:
# the first import leaves that mode and reruns, so app.py's navigation serves the link.
if PagesManager.uses_pages_directory:
    PagesManager.uses_pages_directory = False
    st.rerun()

ANNOTATOR_KEY = "annotator"
DATASET_KEY = "dataset"
RUN_KEY = "run"


@st.cache_resource
def _engine(url: str | None) -> Engine:
    return get_engine(url)


def engine() -> Engine:
    """The engine of ``PCF_DATABASE_URL`` (or the user data folder), one per URL and process."""
    return _engine(os.environ.get(DATABASE_URL_ENV))


@contextmanager
def session() -> Iterator[Session]:
    """A database session; commits are explicit in the `pcf` functions that write."""
    with Session(engine(), expire_on_commit=False) as s:
        yield s


def sidebar() -> None:
    """Who is annotating, which dataset and which run: shared by every page."""
    with st.sidebar:
        st.text_input(
            "Annotator", key=ANNOTATOR_KEY, placeholder="your name", help="Saved with every label."
        )
        with session() as s:
            datasets = [d.name for d in list_datasets(session=s)]
            if not datasets:
                st.warning("The database is empty. Run `pcf demo` or `pcf import`.")
                return
            if st.session_state.get(DATASET_KEY) not in datasets:
                st.session_state[DATASET_KEY] = "demo" if "demo" in datasets else datasets[0]
            st.selectbox("Dataset", datasets, key=DATASET_KEY)
            dataset = get_dataset(st.session_state[DATASET_KEY], session=s)
            runs = [r.name for r in list_runs(session=s, dataset_id=dataset.id)]
            if runs:
                if st.session_state.get(RUN_KEY) not in runs:
                    pcf_runs = [r for r in runs if r.endswith("pcf") or "/pcf/" in r]
                    st.session_state[RUN_KEY] = pcf_runs[0] if pcf_runs else runs[0]
                st.selectbox("Run", runs, key=RUN_KEY)
            else:
                st.session_state[RUN_KEY] = None
                st.info("No run on this dataset yet: start one on the Runs page.")
        st.caption(f"Database: `{database_url()}`")


@st.cache_data(max_entries=16, show_spinner="Computing the run's decisions...")
def _run_analysis(url: str | None, run_id: int, version: tuple) -> RunAnalysis:
    with session() as s:
        return analyse_run(get_run_by_id(run_id, session=s), session=s)


def run_analysis(run: Run) -> RunAnalysis:
    """The run's decisions, flags and slot bias, recomputed only when its calls change."""
    with session() as s:
        version = run_version(run, session=s)
    return _run_analysis(os.environ.get(DATABASE_URL_ENV), run.id, version)


@st.cache_data(max_entries=64, show_spinner=False)
def _search(url: str | None, dataset_id: int, text: str) -> set[str]:
    with session() as s:
        return matching_item_keys(dataset_id, text, session=s)


def search_items(dataset: Dataset, text: str) -> set[str]:
    """Keys of the dataset's items whose id, prompt or a candidate contains ``text``."""
    return _search(os.environ.get(DATABASE_URL_ENV), dataset.id, text)


def current_dataset(s: Session) -> Dataset | None:
    """The dataset chosen in the sidebar."""
    name = st.session_state.get(DATASET_KEY)
    return get_dataset(name, session=s) if name else None


def current_run(s: Session) -> Run | None:
    """The run chosen in the sidebar."""
    name = st.session_state.get(RUN_KEY)
    return get_run(name, session=s) if name else None


def annotator() -> str:
    """The annotator's name from the sidebar, stripped ('' when not given)."""
    return (st.session_state.get(ANNOTATOR_KEY) or "").strip()


def simulated_badge(run: Run | None) -> None:
    """A clear badge on results that came from the simulated judge."""
    if run is not None and is_simulated(run):
        st.warning(f":material/science: **Simulated judge**: {SIMULATED_NOTE}.")
