"""Who is who: a provider's verified identity, local mode's one person, visitors (docs/team.md)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import NoReturn

import streamlit as st

from pages.shared.data import engine, session, written
from pages.shared.frame import auth_configured, stop_for_stranger
from pcf.access import Actor, Role, foreign_host, forwarded_by
from pcf.analysis.markdown import escape_markdown
from pcf.labelling.membership import (
    SignInRefusedError,
    identify,
    local_actor,
    provider_trust,
    record_sign_in,
    set_local_name,
)
from pcf.store import session_scope

SIGNED_IN_KEY = "signed_in_as"  # the identity whose sign-in this browser session recorded
ANONYMOUS_VIEWERS_ENV = "PCF_ANONYMOUS_VIEWERS"
LOOPBACK = ("127.", "localhost", "::1")
VISITOR = Actor("visitor", Role.VIEWER)
# The provider sends a person back to the app's home page: the sign-in page keeps the link they
# followed in the tab's sessionStorage, and the first page drawn after sign-in opens it again
# (on this origin only).
REMEMBER_LINK = """<script>
sessionStorage.setItem("pcf-link", location.pathname + location.search);
</script>"""
FOLLOW_LINK = """<script>
const link = sessionStorage.getItem("pcf-link");
sessionStorage.removeItem("pcf-link");
const target = link && new URL(link, location.origin);
if (target && target.origin === location.origin && target.href !== location.href) {
  location.replace(target.href);
}
</script>"""


def sign_in() -> Actor:
    """Who uses the app now (docs/team.md); until someone is known, the page shows why and stops.

    With sign-in: the member whose verified email and account the provider's ID token shows
    (:func:`pcf.labelling.membership.identify`). Without (local mode): on the loopback address the
    one local person, an admin, unless a reverse proxy forwarded the request (then every visitor
    would be that person) or it names another host than 127.0.0.1, localhost or [::1] (a site
    whose name resolves to this machine: DNS rebinding); elsewhere nobody, unless
    ``PCF_ANONYMOUS_VIEWERS=1`` makes every visitor a viewer.
    """
    if auth_configured():
        return _signed_in_member()
    address = st.get_option("server.address") or ""
    if not address.startswith(LOOPBACK):  # not this machine's loopback address only
        if os.environ.get(ANONYMOUS_VIEWERS_ENV) == "1":
            return VISITOR
        st.error(
            f"This server listens on `{address or 'every address'}` "
            "without sign-in. Configure sign-in (`[auth]` in `.streamlit/secrets.toml`), serve "
            f"on 127.0.0.1, or set `{ANONYMOUS_VIEWERS_ENV}=1` to let every visitor read as a "
            "viewer."
        )
        stop_for_stranger()
    if proxy := forwarded_by(st.context.headers):
        _refuse_local(f"This request came through a proxy (its `{proxy}` header).")
    if (host := foreign_host(st.context.headers)) is not None:
        _refuse_local(
            f"This request is addressed to {escape_markdown(repr(host))}, not to 127.0.0.1, "
            "localhost or [::1] (a site whose name leads to this machine could act as you)."
        )
    with session() as s:
        actor = local_actor(session=s)
    if actor is None:
        st.title("PCF Review")
        st.info("Local mode: one person, who is admin. Say who you are to begin.")
        ask_local_name()
        stop_for_stranger()
    return actor


def _refuse_local(why: str) -> NoReturn:
    """Stop a request that local mode must not serve: ``why``, and what to set up instead."""
    st.error(
        f"{why} Local mode makes whoever reaches 127.0.0.1 the local admin, so it serves only "
        "the person at this machine: configure sign-in (`[auth]` in `.streamlit/secrets.toml`) "
        "to serve others."
    )
    stop_for_stranger()


@st.dialog("Who is working here?", dismissible=False)
def ask_local_name() -> None:
    """Ask the local person's name once; it is saved with every label they give."""
    with st.form("local_name"):
        name = st.text_input("Your name", max_chars=80, help="Saved with every label you give.")
        if st.form_submit_button("Start", type="primary") and written(set_local_name, name):
            st.rerun()


def _signed_in_member() -> Actor:
    section = st.secrets["auth"]
    if not st.user.is_logged_in:
        st.title("PCF Review")
        st.write("Sign in to review, label or read results.")
        # The sections of [auth] with a client_id ([auth.google]...), else the one provider
        # [auth] itself names (its other tables, such as client_kwargs, are settings).
        named = [n for n, v in section.items() if isinstance(v, Mapping) and "client_id" in v]
        for provider in named or ["default"]:
            label = "Sign in" if provider == "default" else f"Sign in with {provider}"
            st.button(label, on_click=st.login, args=(provider,), key=f"sign_in_{provider}")
        st.html(REMEMBER_LINK, unsafe_allow_javascript=True, width="content")
        stop_for_stranger()
    claims = st.user.to_dict()
    # The provider's settings: its section of [auth], or [auth] itself for the one "default";
    # bad ones stop the page with the line that says so.
    provider = str(claims.get("provider") or "default")
    own = provider != "default" and isinstance(section.get(provider), Mapping)
    try:
        trust = provider_trust(
            section[provider] if own else section, f"[auth.{provider}]" if own else "[auth]"
        )
    except ValueError as exc:
        st.error(f"The sign-in settings cannot be used: {escape_markdown(str(exc))}.")
        stop_for_stranger()
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
    # On every run, not only the first: a role without Overview is switched from ``/`` to its
    # first page at once, which can drop this run's elements before the browser draws them.
    with st.sidebar:
        st.html(FOLLOW_LINK, unsafe_allow_javascript=True, width="content")
    return actor
