"""The app's frame: pages run inside app.py's navigation, on behalf of the signed-in person,
with the menu their role may open, and a database that cannot be used told in one line."""

from __future__ import annotations

import runpy
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, NoReturn

import streamlit as st
from streamlit.errors import StreamlitSecretNotFoundError

from pcf.access import Actor, Permission

APP = Path(__file__).resolve().parents[2] / "app.py"
_ACTOR: ContextVar[Actor | None] = ContextVar("pcf_page_actor", default=None)


@contextmanager
def app_frame(actor: Actor) -> Iterator[None]:
    """Run the page app.py's navigation picked as framed by the app (:func:`ensure_app_frame`),
    on behalf of ``actor`` (:func:`current_actor`)."""
    acting = _ACTOR.set(actor)
    try:
        yield
    finally:
        _ACTOR.reset(acting)


def ensure_app_frame() -> None:
    """Make sure this page runs inside app.py's frame; every page calls it first.

    Until some session has called ``st.navigation``, Streamlit serves a new server's ``pages/``
    in its documented legacy mode: a first request to ``/review`` runs ``pages/review.py`` alone,
    without app.py's navigation and sidebar. Such a run hands over to app.py, whose
    ``st.navigation`` ends the legacy mode for good and serves the same address, then stops.
    """
    if _ACTOR.get() is None:
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
    "pages/imports.py": ("Import", ":material/upload_file:", Permission.IMPORT),
    "pages/members.py": ("Members", ":material/group:", Permission.MANAGE_MEMBERS),
}
"""The app's pages, in menu order; a role sees those it may open, the first as ``/``."""


def pages_for(actor: Actor) -> list[st.Page]:
    """The pages ``actor``'s role may open, for ``st.navigation``. A role without Overview lands
    on its first page from a hidden ``/``, so that every page keeps its own address
    (``/adjudicate?label=...`` works for everyone who may label)."""
    allowed = [path for path, (_, _, needs) in PAGES.items() if actor.may(needs)]
    pages = [_page(path) for path in allowed]
    if allowed and allowed[0] != "pages/overview.py":

        def home() -> None:
            # The address's other parameters go along; the sidebar's bound ones (dataset, run)
            # follow their widgets, and Streamlit refuses to clear or set them here.
            address = st.query_params.to_dict()
            kept = {k: v for k, v in address.items() if k not in (DATASET_KEY, RUN_KEY)}
            st.switch_page(allowed[0], query_params=kept)

        pages.insert(0, st.Page(home, title="Home", default=True, visibility="hidden"))
    return pages


def stop_for_stranger() -> NoReturn:
    """Stop the run of a visitor not known yet (name dialog, sign-in screen), the menu hidden:
    without a navigation of its own, a new server lists the files in ``pages/``. All pages are
    listed, so that the address a visitor opened is still theirs once they are known."""
    st.navigation([_page(path) for path in PAGES], position="hidden")
    st.stop()


def _page(path: str) -> st.Page:
    title, icon, _ = PAGES[path]
    return st.Page(path, title=title, icon=icon, default=path == "pages/overview.py")


def page_link(path: str, **options: Any) -> None:
    """``st.page_link`` to ``path``, shown only to those whose role may open that page."""
    if current_actor().may(PAGES[path][2]):
        st.page_link(path, **options)


DATASET_KEY = "dataset"
RUN_KEY = "run"
ITEM_LINK = "item"  # the query parameter of a link to one item (the Review page's)


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


def auth_configured() -> bool:
    """Whether sign-in is configured: an ``[auth]`` section in ``.streamlit/secrets.toml``."""
    try:
        return "auth" in st.secrets
    except StreamlitSecretNotFoundError:
        return False
