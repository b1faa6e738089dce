"""What a page reads: sessions, the sidebar's dataset and run, cached analyses, links to an item."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any, TypeVar

import pandas as pd
import streamlit as st
from sqlalchemy import Engine
from sqlmodel import Session

from pages.shared.frame import DATASET_KEY, ITEM_LINK, RUN_KEY, auth_configured, page_link
from pcf.access import AccessDeniedError, Actor, Permission
from pcf.analysis.against_labels import run_calibration
from pcf.analysis.item_list import datasets_holding
from pcf.analysis.markdown import escape_markdown, inert_markdown
from pcf.analysis.results import RunAnalysis, run_judge, simulates_strong_bias, stored_analysis
from pcf.items import Item
from pcf.labelling.resolutions import comment, thread
from pcf.store import (
    DATABASE_URL_ENV,
    Dataset,
    Run,
    SchemaError,
    database_url,
    get_dataset,
    get_engine,
    get_run,
    list_datasets,
    list_runs,
    load_item,
    matching_item_keys,
    result_revision,
    run_states,
    session_scope,
)

T = TypeVar("T")


_engine = st.cache_resource(get_engine)


def engine() -> Engine:
    """The engine of ``PCF_DATABASE_URL``, one per URL and process; a database at a schema
    revision this code cannot use stops the page with the one line that says why."""
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


def preferred_run(runs: list[Run]) -> int:
    """Index of the run the sidebar opens on: the first PCF run whose simulated judge has a
    strong position bias (the demo's showcase), else the first PCF run, else the first."""
    pcf_runs = [i for i, r in enumerate(runs) if r.protocol == "pcf"]
    showcase = [i for i in pcf_runs if simulates_strong_bias(runs[i])]
    return (showcase or pcf_runs or [0])[0]


def sidebar(actor: Actor) -> None:
    """Who is signed in, which dataset and which run, for every page. The dataset and the run
    live in the address (``?dataset=&run=``, defaults left out); who acts comes from sign-in."""
    with st.sidebar:
        st.markdown(f"**{escape_markdown(actor.identity)}** · {actor.role.value}")
        if auth_configured():
            st.button("Sign out", icon=":material/logout:", on_click=st.logout, key="sign_out")
        with session() as s:
            datasets = {d.name: d for d in list_datasets(session=s)}
            if not datasets:
                st.warning("The database is empty. Run `pcf demo` or `pcf import`.")
                return
            follow_item_link(s)
            names = list(datasets)
            picked = st.selectbox(
                "Dataset",
                names,
                index=names.index("demo") if "demo" in datasets else 0,
                key=DATASET_KEY,
                bind="query-params",
                on_change=forget_item_link,
            )
            runs = list_runs(session=s, dataset_id=datasets[picked].id)
            watch_runs(datasets[picked].id, run_statuses(runs, session=s))
            if runs:
                shown = st.selectbox(
                    "Run",
                    [r.name for r in runs],
                    index=preferred_run(runs),
                    key=RUN_KEY,
                    bind="query-params",
                )
                # The box cuts a long name: the caption wraps it in full, with what the run is.
                run = next(r for r in runs if r.name == shown)
                st.caption(
                    f"{escape_markdown(run.name)}: {run.protocol}, K={run.k}, "
                    f"{escape_markdown(run_judge(run))}"
                )
            else:
                st.info("No run on this dataset yet: start one on the Runs page.")
        if actor.may(Permission.SEE_RESULTS):
            st.caption(f"Database: `{database_url()}`")


LIVE_RUN_STATUSES = ("pending", "running")
RUN_WATCH_S = 2.0


def run_statuses(runs: list[Run], *, session: Session) -> dict[str, str]:
    """``{run name: status to show}`` (a run whose process died is ``interrupted``)."""
    states = run_states(runs, session=session)
    return {run.name: states[run.id] for run in runs}


def watch_runs(dataset_id: int, drawn: dict[str, str]) -> None:
    """While a run of the dataset is live (judged by a live process: this server, another, the
    CLI), look at its runs every :data:`RUN_WATCH_S` seconds and rerun the app when they differ
    from ``drawn``, what the page was drawn with: a run that ends shows as ended, on every page
    and in this sidebar, without a reload. A page with no live run does not poll."""
    live = any(status in LIVE_RUN_STATUSES for status in drawn.values())
    st.fragment(_rerun_on_change, run_every=RUN_WATCH_S if live else None)(dataset_id, drawn)


def _rerun_on_change(dataset_id: int, drawn: dict[str, str]) -> None:
    if not any(status in LIVE_RUN_STATUSES for status in drawn.values()):
        return
    with session() as s:
        now = run_statuses(list_runs(session=s, dataset_id=dataset_id), session=s)
    if now != drawn:
        st.rerun(scope="app")


def follow_item_link(s: Session) -> None:
    """Open the dataset of an item named in the address without one (``?item=ITEM_ID``): the
    one dataset that has it, unless the dataset chosen has it; else :func:`item_link_problem`."""
    item_key = st.query_params.get(ITEM_LINK)
    if not item_key or DATASET_KEY in st.query_params:
        return
    holders = datasets_holding(item_key, session=s)
    if st.session_state.get(DATASET_KEY) not in holders and len(holders) == 1:
        st.session_state[DATASET_KEY] = st.query_params[DATASET_KEY] = holders[0]
        st.session_state.pop(RUN_KEY, None)


def forget_item_link() -> None:
    """Drop the item from the address when another dataset is picked (it names the old one's)."""
    st.query_params.pop(ITEM_LINK, None)


def item_link_problem(item_key: str, dataset: Dataset) -> None:
    """Say why the item the address names is not shown and offer the datasets that have it,
    then stop the page (it never shows another item in its place)."""
    with session() as s:
        holders = datasets_holding(item_key, session=s)
    name, named = escape_markdown(item_key), escape_markdown(dataset.name)
    if not holders:
        st.error(f"No dataset has an item **{name}**: the link is wrong or the item was removed.")
    elif dataset.name in holders:
        st.warning(f"The run chosen has no decision on item **{name}** of **{named}**.")
        holders = []
    elif len(holders) > 1:
        st.warning(f"Item **{name}** is in {len(holders)} datasets. Which one do you mean?")
    else:
        st.warning(f"Dataset **{named}** has no item **{name}**; it is in:")
    for holder in holders:
        st.button(
            f"{holder}: item {item_key}",
            icon=":material/dataset:",
            key=f"item_link_{holder}",
            on_click=open_dataset,
            args=(holder,),
        )
    st.button(
        f"The items of {dataset.name}",
        icon=":material/list:",
        key="item_link_none",
        on_click=forget_item_link,
    )
    st.stop()


def open_dataset(name: str) -> None:
    """Pick dataset ``name`` in the sidebar (its default run with it)."""
    st.session_state[DATASET_KEY] = name
    st.session_state.pop(RUN_KEY, None)


@st.cache_resource(max_entries=64, show_spinner=False)
def _kept(
    url: str | None, what: str, run_id: int, revision: str, _compute: Callable[..., T], _run: Run
) -> T:
    with session_scope(engine()) as s:
        return _compute(_run, session=s)


def shared_result(
    compute: Callable[..., T], run: Run, spinner: str = "", *, labels: bool = False
) -> T:
    """``compute(run, session=...)``, figures stored in the database for the revision of the
    run's calls (with ``labels``, and of its dataset's labels), kept here for every session
    while that revision stays the same: shared, never copied, so pages must not change them."""
    with session() as s:
        revision = result_revision(run, session=s, labels=labels)
    with st.spinner(spinner) if spinner else nullcontext():
        url = os.environ.get(DATABASE_URL_ENV)
        return _kept(url, compute.__qualname__, run.id, revision, compute, run)


def run_analysis(run: Run) -> RunAnalysis:
    """The run's decisions, flags and slot bias (:func:`shared_result`)."""
    return shared_result(stored_analysis, run, "Reading the run's decisions...")


def run_calibration_on(run: Run, table: pd.DataFrame) -> pd.Series | None:
    """Each item's calibrated chance that the judge is wrong (:func:`run_calibration`, shared
    for the revision of the run's calls and labels), from ``table``, the run's decision table of
    :func:`run_analysis`: a label then reads the stored chances, not the whole table again."""

    def run_calibration_of_table(run: Run, *, session: Session) -> pd.Series | None:
        return run_calibration(run, session=session, table=table)

    return shared_result(run_calibration_of_table, run, labels=True)


@st.cache_data(max_entries=64, show_spinner=False)
def _search(url: str | None, dataset_id: int, text: str) -> set[str]:
    with session() as s:
        return matching_item_keys(dataset_id, text, session=s)


def search_items(dataset: Dataset, text: str) -> set[str]:
    """Keys of the dataset's items whose id, prompt or a candidate contains ``text``."""
    return _search(os.environ.get(DATABASE_URL_ENV), dataset.id, text)


def stored_item(item_db_id: int, s: Session) -> Item:
    """The item with this database id, read from the database (items are never deleted)."""
    item = load_item(item_db_id, session=s)
    if item is None:
        raise LookupError(f"no item with database id {item_db_id}")
    return item


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
        page_link("pages/imports.py", label="Import a dataset", icon=":material/upload_file:")
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


def written(change: Callable[..., object], *args: Any, **kwargs: Any) -> bool:
    """Whether ``change(*args, session=..., **kwargs)`` was written, in one transaction; a change
    the application refuses (a bad value, a missing right) is not, and the page says why."""
    try:
        with session_scope(engine()) as s:
            change(*args, session=s, **kwargs)
    except (ValueError, AccessDeniedError) as exc:
        st.error(escape_markdown(str(exc)))
        return False
    return True


def comment_thread(item_db_id: int, actor: Actor, key: str) -> None:
    """The item's comments and a box to add one, for those who may see them (reviewers; an
    annotator once their own label of it is saved); nothing for others."""
    with session() as s:
        comments = thread(item_db_id, session=s, actor=actor)
    if comments is None:
        return
    st.markdown("##### Comments")
    for said in comments:
        st.caption(f"{escape_markdown(said.author)} · {said.created_at:%Y-%m-%d %H:%M UTC}")
        st.markdown(inert_markdown(said.text))
    with st.form(f"{key}_comment", clear_on_submit=True):
        text = st.text_area("Your comment", placeholder="what you see in this item, and why")
        if st.form_submit_button("Add comment") and written(
            comment, item_db_id, actor=actor, text=text
        ):
            st.rerun()
