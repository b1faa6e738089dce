"""What every page shares: the app's frame, the database engine, the sidebar choices, the
simulated badge.

This package sits in a subfolder of ``pages/``, which Streamlit's legacy folder-page mode does
not list as a page. Pages read and write only through `pcf`; this module only connects them to
Streamlit.
"""

from __future__ import annotations

import os
import runpy
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import streamlit as st
from sqlalchemy import Engine
from sqlmodel import Session

from pcf.analysis.item_detail import inert_markdown
from pcf.analysis.results import SIMULATED_NOTE, RunAnalysis, analyse_run, is_simulated
from pcf.store import (
    DATABASE_URL_ENV,
    Dataset,
    Run,
    SchemaError,
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

APP = Path(__file__).resolve().parents[2] / "app.py"
_IN_APP: ContextVar[bool] = ContextVar("pcf_page_in_app", default=False)


@contextmanager
def app_frame() -> Iterator[None]:
    """Mark the page app.py's navigation runs as framed by the app (:func:`ensure_app_frame`)."""
    token = _IN_APP.set(True)
    try:
        yield
    finally:
        _IN_APP.reset(token)


def ensure_app_frame() -> None:
    """Make sure this page runs inside app.py's frame; every page calls it first.

    Until some session has called ``st.navigation``, Streamlit serves a new server's apps with a
    ``pages/`` folder in its documented legacy mode: a first request to ``/review`` runs
    ``pages/review.py`` alone, without app.py's navigation and sidebar. A page run that way
    hands over to app.py, whose ``st.navigation`` ends the legacy mode for good and serves the
    same address, then stops its own run.
    """
    if not _IN_APP.get():
        runpy.run_path(str(APP), run_name="__main__")
        st.stop()


ANNOTATOR_KEY = "annotator"
PLAIN_KEY = "plain"  # show prompts and answers as plain text instead of inert Markdown
LONG_ANSWER = 500  # characters: longer answers scroll inside a box of fixed height
DATASET_KEY = "dataset"
RUN_KEY = "run"


@st.cache_resource
def _engine(url: str | None) -> Engine:
    return get_engine(url)


def engine() -> Engine:
    """The engine of ``PCF_DATABASE_URL`` (or the user data folder), one per URL and process.

    A database this code cannot use at its schema revision stops the page with the one line
    that says why (e.g. a PostgreSQL database to upgrade with ``pcf db upgrade``).
    """
    try:
        return _engine(os.environ.get(DATABASE_URL_ENV))
    except SchemaError as exc:
        st.error(inert_markdown(str(exc)))
        st.stop()


@contextmanager
def session() -> Iterator[Session]:
    """A database session; commits are explicit in the `pcf` functions that write."""
    with Session(engine(), expire_on_commit=False) as s:
        yield s


def preferred_run(runs: list[str]) -> int:
    """Index of the run the sidebar opens on: the first PCF run, else the first run."""
    return next((i for i, r in enumerate(runs) if r.endswith("pcf") or "/pcf/" in r), 0)


def sidebar() -> None:
    """Who is annotating, which dataset and which run: shared by every page.

    The three choices live in the address (``?annotator=&dataset=&run=``), so a reload or a
    shared link restores them; a choice equal to its default is left out of the address.
    """
    with st.sidebar:
        st.text_input(
            "Annotator",
            key=ANNOTATOR_KEY,
            placeholder="your name",
            help="Saved with every label.",
            bind="query-params",
        )
        with session() as s:
            datasets = [d.name for d in list_datasets(session=s)]
            if not datasets:
                st.warning("The database is empty. Run `pcf demo` or `pcf import`.")
                return
            dataset = st.selectbox(
                "Dataset",
                datasets,
                index=datasets.index("demo") if "demo" in datasets else 0,
                key=DATASET_KEY,
                bind="query-params",
            )
            runs = [
                r.name for r in list_runs(session=s, dataset_id=get_dataset(dataset, session=s).id)
            ]
            if runs:
                st.selectbox(
                    "Run", runs, index=preferred_run(runs), key=RUN_KEY, bind="query-params"
                )
            else:
                st.info("No run on this dataset yet: start one on the Runs page.")
        st.caption(f"Database: `{database_url()}`")


@st.cache_resource(max_entries=16, show_spinner="Computing the run's decisions...")
def _run_analysis(url: str | None, run_id: int, version: tuple) -> RunAnalysis:
    """Shared by every session and never copied: pages read it and must not change it."""
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
    """The run chosen in the sidebar (None when the dataset has no run)."""
    dataset = current_dataset(s)
    name = st.session_state.get(RUN_KEY)
    run = get_run(name, session=s) if name else None
    return run if run is not None and dataset is not None and run.dataset_id == dataset.id else None


def require_dataset(s: Session) -> Dataset:
    """The dataset chosen in the sidebar; without one the page says how to add one and stops."""
    dataset = current_dataset(s)
    if dataset is None:
        st.info("The database has no dataset yet: run `pcf demo` or `pcf import`, then reload.")
        st.stop()
    return dataset


def require_run(s: Session) -> Run:
    """The run chosen in the sidebar; without one the page says how to start one and stops."""
    require_dataset(s)
    run = current_run(s)
    if run is None:
        st.info("This dataset has no run yet: start one on the Runs page.")
        st.stop()
    return run


def annotator() -> str:
    """The annotator's name from the sidebar, stripped ('' when not given)."""
    return (st.session_state.get(ANNOTATOR_KEY) or "").strip()


def simulated_badge(run: Run | None) -> None:
    """A clear badge on results that came from the simulated judge."""
    if run is not None and is_simulated(run):
        st.warning(f":material/science: **Simulated judge**: {SIMULATED_NOTE}.")


def plain_text_toggle() -> bool:
    """The switch between inert Markdown and plain text for prompts and answers (per session)."""
    return st.toggle(
        "Plain text",
        key=PLAIN_KEY,
        persist_state="session",
        help="Show the prompt and the answers exactly as stored, without Markdown formatting.",
    )


def show_text(text: str, plain: bool) -> None:
    """A prompt or an answer: inert Markdown (no HTML, images or links), or exactly as stored."""
    if plain:
        st.text(text)
    else:
        st.markdown(inert_markdown(text))


def change_in_points(points: float, unit: str = "points") -> dict[str, Any]:
    """``st.metric`` arguments for a change in points: green up, red down, and a grey
    "no change" (not a green "+0.0") when it rounds to zero."""
    if round(points, 1) == 0:
        return {"delta": f"no change ({unit})", "delta_color": "off", "delta_arrow": "off"}
    return {"delta": f"{points:+.1f} {unit}"}


def answer_height(texts: list[str], height: int) -> int | str:
    """Height of the boxes that show answers side by side: ``height`` (scrolling) when one of
    them is long, else just their content."""
    return height if max(map(len, texts), default=0) > LONG_ANSWER else "content"
