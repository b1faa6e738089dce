"""What every page shares: the app's frame, the database engine, the sidebar choices, the
simulated badge and the adaptive-run note.

This package sits in a subfolder of ``pages/``, which Streamlit's legacy folder-page mode does
not list as a page. Pages read and write only through `pcf`; this module only connects them to
Streamlit.
"""

from __future__ import annotations

import os
import runpy
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal, NoReturn

import streamlit as st
from sqlalchemy import Engine
from sqlmodel import Session
from streamlit.errors import StreamlitSecretNotFoundError

from pcf.access import Actor, Permission, Role, forwarded_by
from pcf.analysis.item_list import datasets_holding
from pcf.analysis.markdown import Preview, escape_markdown, inert_markdown, preview
from pcf.analysis.results import (
    ADAPTIVE_NOTE,
    SIMULATED_NOTE,
    RunAnalysis,
    is_simulated,
    simulates_strong_bias,
    stopping_label,
    stored_analysis,
)
from pcf.items import Item
from pcf.labelling.membership import (
    ProviderTrust,
    SignInRefusedError,
    identify,
    local_actor,
    provider_trust,
    record_sign_in,
    set_local_name,
)
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
    session_scope,
    storage_problem,
)

APP = Path(__file__).resolve().parents[2] / "app.py"
_IN_APP: ContextVar[bool] = ContextVar("pcf_page_in_app", default=False)
_ACTOR: ContextVar[Actor | None] = ContextVar("pcf_page_actor", default=None)


@contextmanager
def app_frame(actor: Actor) -> Iterator[None]:
    """Run the page app.py's navigation picked as framed by the app (:func:`ensure_app_frame`),
    on behalf of ``actor`` (:func:`current_actor`)."""
    framed, acting = _IN_APP.set(True), _ACTOR.set(actor)
    try:
        yield
    finally:
        _IN_APP.reset(framed)
        _ACTOR.reset(acting)


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


PAGES = {
    # file: (title, icon, what the role must be allowed to open it)
    "pages/overview.py": ("Overview", ":material/dashboard:", Permission.SEE_RESULTS),
    "pages/review.py": ("Review", ":material/search:", Permission.SEE_RESULTS),
    "pages/adjudicate.py": ("Adjudicate", ":material/how_to_vote:", Permission.LABEL),
    "pages/compare.py": ("Compare", ":material/compare_arrows:", Permission.SEE_RESULTS),
    "pages/resolve.py": ("Resolve", ":material/gavel:", Permission.RESOLVE),
    "pages/team.py": ("Team", ":material/groups:", Permission.SEE_RESULTS),
    "pages/runs.py": ("Runs", ":material/play_circle:", Permission.SEE_RESULTS),
    "pages/weights.py": ("Weights", ":material/tune:", Permission.SEE_RESULTS),
    "pages/report.py": ("Report", ":material/summarize:", Permission.SEE_RESULTS),
    "pages/members.py": ("Members", ":material/group:", Permission.MANAGE_MEMBERS),
}
"""The app's pages, in menu order; a role sees those it may open, the first as ``/``."""


def pages_for(actor: Actor) -> list[st.Page]:
    """The pages ``actor``'s role may open, for ``st.navigation``; Overview is ``/``.

    A role without Overview lands on its first page from a hidden ``/``, so that every page
    keeps its own address (``/adjudicate?label=...`` works for everyone who may label).
    """
    allowed = [path for path, (_, _, needs) in PAGES.items() if actor.may(needs)]
    pages = [
        st.Page(path, title=title, icon=icon, default=path == "pages/overview.py")
        for path in allowed
        for title, icon, _ in [PAGES[path]]
    ]
    if allowed and allowed[0] != "pages/overview.py":

        def home() -> None:
            # The address's other parameters go along; the sidebar's bound ones (dataset, run)
            # follow their widgets, and Streamlit refuses to clear or set them here.
            address = st.query_params.to_dict()
            kept = {key: value for key, value in address.items() if key not in SIDEBAR_KEYS}
            st.switch_page(allowed[0], query_params=kept)

        pages.insert(0, st.Page(home, title="Home", default=True, visibility="hidden"))
    return pages


def stop_for_stranger() -> NoReturn:
    """Stop the run of a visitor not known yet (the name dialog, the sign-in screen), the
    app's menu hidden: without a navigation of its own, a new server shows Streamlit's list of
    the files in ``pages/`` ("app, adjudicate, compare..."). The pages are all listed, so that
    the address a visitor opened is still theirs once they are known."""
    st.navigation(
        [
            st.Page(path, title=title, icon=icon, default=path == "pages/overview.py")
            for path, (title, icon, _) in PAGES.items()
        ],
        position="hidden",
    )
    st.stop()


def page_link(path: str, *, where: Any = st, **options: Any) -> None:
    """``st.page_link`` to ``path`` (in the container ``where``), shown only to those whose
    role may open that page."""
    if current_actor().may(PAGES[path][2]):
        where.page_link(path, **options)


@contextmanager
def storage_errors() -> Iterator[None]:
    """Show a database that cannot be used (a full disk, a read-only file, a file moved away)
    in one line instead of a traceback; any other error goes on."""
    try:
        yield
    except Exception as exc:
        problem = storage_problem(exc, database_url())
        if problem is None:
            raise
        st.error(f"The database cannot be used: {escape_markdown(problem)}.")


PLAIN_KEY = "plain"  # show prompts and answers as plain text instead of inert Markdown
LONG_ANSWER = 500  # characters: longer answers scroll inside a box of fixed height
DATASET_KEY = "dataset"
RUN_KEY = "run"
SIDEBAR_KEYS = (DATASET_KEY, RUN_KEY)  # the sidebar widgets bound to the address
ITEM_LINK = "item"  # the query parameter of a link to one item (the Review page's)


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


def preferred_run(runs: list[Run]) -> int:
    """Index of the run the sidebar opens on: the first PCF run whose simulated judge has a
    strong position bias (the demo's run that shows what the orderings change), else the first
    PCF run, else the first run."""
    pcf_runs = [i for i, r in enumerate(runs) if r.protocol == "pcf"]
    showcase = [i for i in pcf_runs if simulates_strong_bias(runs[i])]
    return (showcase or pcf_runs or [0])[0]


def sidebar(actor: Actor) -> None:
    """Who is signed in, which dataset and which run: shared by every page.

    The dataset and the run live in the address (``?dataset=&run=``), so a reload or a shared
    link restores them; a choice equal to its default is left out of the address. Who acts
    never does: it comes from sign-in (:func:`sign_in`).
    """
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
            if runs:
                st.selectbox(
                    "Run",
                    [r.name for r in runs],
                    index=preferred_run(runs),
                    key=RUN_KEY,
                    bind="query-params",
                )
            else:
                st.info("No run on this dataset yet: start one on the Runs page.")
        if actor.may(Permission.SEE_RESULTS):
            st.caption(f"Database: `{database_url()}`")


def follow_item_link(s: Session) -> None:
    """Open the dataset of an item named in the address without one (``?item=ITEM_ID``).

    The dataset chosen so far stays when it has the item; else the one dataset that has it is
    chosen. When several or none have it the dataset stays, and the page that reads the item
    says so (:func:`item_link_problem`).
    """
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


@st.cache_resource(max_entries=16, show_spinner="Reading the run's decisions...")
def _run_analysis(url: str | None, run_id: int, revision: str, _run: Run) -> RunAnalysis:
    """Shared by every session and never copied: pages read it and must not change it.

    ``_run``, the run of ``run_id``, is not hashed: the URL, the id and the revision key it.
    """
    with session_scope(engine()) as s:
        return stored_analysis(_run, session=s)


def run_analysis(run: Run) -> RunAnalysis:
    """The run's decisions, flags and slot bias: stored in the database for the revision of its
    calls (computed there once, after any change), and kept here while they stay the same."""
    return _run_analysis(os.environ.get(DATABASE_URL_ENV), run.id, revision_of(run), run)


def revision_of(run: Run, *, labels: bool = False) -> str:
    """The revision of the run's calls (with ``labels``, and of its dataset's labels) that a
    page's cache of the run's figures is kept for."""
    with session() as s:
        return result_revision(run, session=s, labels=labels)


@st.cache_data(max_entries=64, show_spinner=False)
def _search(url: str | None, dataset_id: int, text: str) -> set[str]:
    with session() as s:
        return matching_item_keys(dataset_id, text, session=s)


def search_items(dataset: Dataset, text: str) -> set[str]:
    """Keys of the dataset's items whose id, prompt or a candidate contains ``text``."""
    return _search(os.environ.get(DATABASE_URL_ENV), dataset.id, text)


def stored_item(item_db_id: int, s: Session) -> Item:
    """The item with this database id, which the page read from the database: items are never
    deleted, so it is there."""
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


def current_actor() -> Actor:
    """Who acts in this page run: the person app.py signed in (:func:`sign_in`)."""
    actor = _ACTOR.get()
    if actor is None:
        raise RuntimeError("no one is signed in: pages run inside app.py's frame")
    return actor


def require_permission(permission: Permission) -> Actor:
    """The actor, when their role allows ``permission``; else the page says so and stops."""
    actor = current_actor()
    if not actor.may(permission):
        st.error(f"Your role ({actor.role.value}) may not {permission.value}.")
        st.stop()
    return actor


def simulated_badge(run: Run | None) -> None:
    """A clear badge on results that came from the simulated judge, and the note of an
    adaptive run."""
    if run is not None and is_simulated(run):
        st.warning(f":material/science: **Simulated judge**: {SIMULATED_NOTE}.")
    if run is not None and (label := stopping_label(run)):
        st.info(f":material/timer: **Adaptive run** ({label}): {ADAPTIVE_NOTE}.")


def plain_text_toggle() -> bool:
    """The switch between inert Markdown and plain text for prompts and answers (per session)."""
    return st.toggle(
        "Plain text",
        key=PLAIN_KEY,
        persist_state="session",
        help="Show the prompt and the answers exactly as stored, without Markdown formatting.",
    )


SHOWN_IN_FULL_KEY = "shown_in_full"  # keys of the long texts this session asked to see whole


@st.cache_data(max_entries=64, show_spinner=False)
def _inert(text: str) -> str:
    return inert_markdown(text)


def _part_shown(text: str, key: str) -> Preview:
    """All of ``text`` once asked for, else its first :data:`~pcf.analysis.markdown.RENDER_LIMIT`
    characters, with a button that asks for the rest."""
    shown_in_full = st.session_state.setdefault(SHOWN_IN_FULL_KEY, set())
    return Preview(text, 0) if key in shown_in_full else preview(text)


def _show_all_button(part: Preview, key: str) -> None:
    if part.hidden:
        st.button(
            f"Show all: {part.hidden:,} more characters",
            key=f"show_all_{key}",
            icon=":material/unfold_more:",
            on_click=st.session_state[SHOWN_IN_FULL_KEY].add,
            args=(key,),
        )


def show_text(text: str, plain: bool, key: str) -> None:
    """A prompt or an answer: inert Markdown (no HTML, images or links), or exactly as stored.

    A long text shows its start, and all of it on demand; ``key`` names the text in the page.
    """
    part = _part_shown(text, key)
    if plain:
        st.text(part.text)
    else:
        st.markdown(_inert(part.text))
    _show_all_button(part, key)


def show_code(text: str, key: str, language: str | None = None) -> None:
    """A raw prompt or response as code: its start, and all of it on demand (see show_text)."""
    part = _part_shown(text, key)
    st.code(part.text, language=language, wrap_lines=True)
    _show_all_button(part, key)


def change_in_points(points: float, unit: str = "points") -> dict[str, Any]:
    """``st.metric`` arguments for a change in points: green up, red down, and a grey
    "no change" (not a green "+0.0") when it rounds to zero."""
    if round(points, 1) == 0:
        return {"delta": f"no change ({unit})", "delta_color": "off", "delta_arrow": "off"}
    return {"delta": f"{points:+.1f} {unit}"}


def answer_height(texts: list[str], height: int) -> int | Literal["content"]:
    """Height of the boxes that show answers side by side: ``height`` (scrolling) when one of
    them is long, else just their content."""
    return height if max(map(len, texts), default=0) > LONG_ANSWER else "content"


# ---------------------------------------------------------------- who is who

SIGNED_IN_KEY = "signed_in_as"  # the identity whose sign-in this browser session recorded
ANONYMOUS_VIEWERS_ENV = "PCF_ANONYMOUS_VIEWERS"
LOOPBACK = ("127.", "localhost", "::1")
VISITOR = Actor("visitor", Role.VIEWER)


def auth_configured() -> bool:
    """Whether sign-in is configured: an ``[auth]`` section in ``.streamlit/secrets.toml``."""
    try:
        return "auth" in st.secrets
    except StreamlitSecretNotFoundError:
        return False


def sign_in_providers() -> list[str]:
    """The configured providers: the sections of ``[auth]`` (``[auth.google]``...), or
    ``default`` when ``[auth]`` itself names one provider."""
    section = st.secrets["auth"]
    named = [name for name, value in section.items() if isinstance(value, Mapping)]
    return named or ["default"]


def serves_loopback() -> bool:
    """Whether the server listens on this machine's loopback address only."""
    address = st.get_option("server.address") or ""
    return address.startswith(LOOPBACK)


def sign_in() -> Actor:
    """Who uses the app now; until someone is known, the page shows why and stops.

    With sign-in configured: the member whose verified email and account the provider's ID
    token shows (:func:`pcf.labelling.membership.identify`; a stranger is told to ask an admin,
    and sees nothing else). Without it (local mode): on the loopback address, the one local
    person, an admin, whose name is asked once, unless a reverse proxy forwarded the request
    (then every visitor would be that person); on any other address, nobody, unless the
    operator set ``PCF_ANONYMOUS_VIEWERS=1``: then every visitor is a viewer.
    """
    if auth_configured():
        return _signed_in_member()
    if not serves_loopback():
        if os.environ.get(ANONYMOUS_VIEWERS_ENV) == "1":
            return VISITOR
        st.error(
            f"This server listens on `{st.get_option('server.address') or 'every address'}` "
            "without sign-in. Configure sign-in (`[auth]` in `.streamlit/secrets.toml`), serve "
            f"on 127.0.0.1, or set `{ANONYMOUS_VIEWERS_ENV}=1` to let every visitor read as a "
            "viewer."
        )
        stop_for_stranger()
    if proxy := forwarded_by(st.context.headers):
        st.error(
            f"This request came through a proxy (its `{proxy}` header). Local mode makes whoever "
            "reaches 127.0.0.1 the local admin, so it serves only the person at this machine: "
            "configure sign-in (`[auth]` in `.streamlit/secrets.toml`) to serve others."
        )
        stop_for_stranger()
    with session() as s:
        actor = local_actor(session=s)
    if actor is None:
        st.title("PCF Review")
        st.info("Local mode: one person, who is admin. Say who you are to begin.")
        ask_local_name()
        stop_for_stranger()
    return actor


@st.dialog("Who is working here?", dismissible=False)
def ask_local_name() -> None:
    """Ask the local person's name once; it is saved with every label they give."""
    with st.form("local_name"):
        name = st.text_input("Your name", max_chars=80, help="Saved with every label you give.")
        if st.form_submit_button("Start", type="primary"):
            try:
                with session_scope(engine()) as s:
                    set_local_name(name, session=s)
            except ValueError as exc:
                st.error(str(exc))
            else:
                st.rerun()


def _trust_of(provider: str) -> ProviderTrust:
    """The operator's settings for ``provider`` (its section of ``[auth]``; the section itself
    for the one ``default`` provider); a bad one stops the page with the line that says so."""
    section = st.secrets["auth"]
    named = provider != "default" and isinstance(section.get(provider), Mapping)
    try:
        return provider_trust(
            section[provider] if named else section,
            f"[auth.{provider}]" if named else "[auth]",
        )
    except ValueError as exc:
        st.error(f"The sign-in settings cannot be used: {escape_markdown(str(exc))}.")
        stop_for_stranger()


def _signed_in_member() -> Actor:
    if not st.user.is_logged_in:
        st.title("PCF Review")
        st.write("Sign in to review, label or read results.")
        for provider in sign_in_providers():
            label = "Sign in" if provider == "default" else f"Sign in with {provider}"
            st.button(label, on_click=st.login, args=(provider,), key=f"sign_in_{provider}")
        stop_for_stranger()
    claims = st.user.to_dict()
    trust = _trust_of(str(claims.get("provider") or "default"))
    try:
        with session_scope(engine()) as s:
            actor = identify(claims, session=s, trust=trust)
    except SignInRefusedError as exc:
        st.title("Sign-in refused")
        st.error(f"Not signed in: {escape_markdown(str(exc))}.")
        st.button("Sign out", on_click=st.logout)
        stop_for_stranger()
    if actor is None:
        st.title("No access yet")
        st.write(
            f"You are signed in as **{escape_markdown(str(claims['email']))}**, who is not a "
            "member of this PCF Review. Ask an admin of this server to add you."
        )
        st.button("Sign out", on_click=st.logout)
        stop_for_stranger()
    if st.session_state.get(SIGNED_IN_KEY) != actor.identity:
        with session_scope(engine()) as s:
            record_sign_in(actor, session=s)
        st.session_state[SIGNED_IN_KEY] = actor.identity
    return actor
