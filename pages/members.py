"""Members: who may sign in and as what, their HTTP API tokens, and the audit log (admins
only)."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from pages.shared import engine, ensure_app_frame, require_permission, session, written
from pcf.access import AccessDeniedError, Permission, Role
from pcf.analysis.markdown import escape_markdown
from pcf.labelling.audit import AUDIT_COLUMNS, audit_log
from pcf.labelling.membership import add_member, members, remove_member
from pcf.labelling.tokens import Scope, create_token, parse_duration, revoke, tokens
from pcf.store import session_scope

NOTICE_KEY = "members_notice"  # what the last change did, shown after the rerun it causes
CREATED_KEY = "members_created"  # a token just created: shown once, after the rerun

ensure_app_frame()
actor = require_permission(Permission.MANAGE_MEMBERS)
st.title("Members")
st.caption(
    "Who may sign in, and what each role may do: **admin** everything; **reviewer** sees "
    "everything and resolves disagreements; **annotator** labels, blind; **viewer** reads "
    "results. A person signs in with the email their provider verified; their first sign-in "
    "binds them to that account (issuer), and no other account signs in as them."
)

if notice := st.session_state.pop(NOTICE_KEY, None):
    st.success(escape_markdown(notice))
with session() as s:
    everyone = members(session=s, actor=actor)
if everyone:
    member_rows = [
        {
            "email": m.email,
            "role": m.role,
            "added by": m.added_by,
            "added": m.added_at,
            "signs in at": m.issuer,
        }
        for m in everyone
    ]
    st.dataframe(pd.DataFrame(member_rows), hide_index=True, width="stretch")
else:
    st.info("No member yet: add one below (or with `pcf members add EMAIL --role ROLE`).")

add, remove = st.columns(2, gap="large")
with add, st.form("members_add", clear_on_submit=True):
    st.markdown("**Add a member or change a role**")
    email = st.text_input("Email", placeholder="carol@example.com")
    roles = list(Role)  # named: written inline, mypy takes selectbox's overload for no options
    role = st.selectbox("Role", roles, index=roles.index(Role.ANNOTATOR))
    if st.form_submit_button("Save", type="primary"):
        try:
            with session_scope(engine()) as s:
                saved = add_member(email, role, session=s, actor=actor)
        except ValueError as exc:
            st.error(escape_markdown(str(exc)))
        else:
            st.session_state[NOTICE_KEY] = f"{saved.email} is now {saved.role}."
            st.rerun()
with remove, st.form("members_remove"):
    st.markdown("**Remove a member** (their labels stay)")
    gone = st.selectbox("Member", [m.email for m in everyone], index=None)
    removed = st.form_submit_button("Remove", disabled=not everyone)
    if removed and gone and written(remove_member, gone, actor=actor):
        st.session_state[NOTICE_KEY] = f"{gone} was removed; their labels stay."
        st.rerun()

st.subheader("API tokens")
st.caption(
    "A token lets a pipeline use the HTTP API (docs: Pipelines) as one member, within its scope "
    "(read, label, run or admin; each holds the ones before) and never beyond the member's "
    "role. Its secret is shown once and stored only hashed. The same as `pcf tokens`."
)
if secret := st.session_state.pop(CREATED_KEY, None):
    st.warning("Copy the token now: it is shown this once.", icon=":material/key:")
    st.code(secret, language=None)
with session() as s:
    listed = tokens(session=s, actor=actor)
if listed:
    token_rows = [
        {
            "id": t.id,
            "member": t.email,
            "scope": t.scope,
            "starts with": t.prefix,
            "created by": t.created_by,
            "created": t.created_at,
            "expires": t.expires_at,
            "revoked": t.revoked_at,
        }
        for t in listed
    ]
    st.dataframe(pd.DataFrame(token_rows), hide_index=True, width="stretch")
create, withdraw = st.columns(2, gap="large")
with create, st.form("members_token_create", clear_on_submit=True):
    st.markdown("**Create a token**")
    owner = st.selectbox("For member", [m.email for m in everyone], index=None)
    scopes = list(Scope)
    scope = st.selectbox("Scope", scopes, index=scopes.index(Scope.READ))
    expires = st.text_input("Expires after", placeholder="30d, 12h or 15m; empty: never")
    if st.form_submit_button("Create token", type="primary", disabled=not everyone) and owner:
        try:
            expires_in = parse_duration(expires) if expires.strip() else None
            with session_scope(engine()) as s:
                made = create_token(owner, scope, session=s, actor=actor, expires_in=expires_in)
        except (ValueError, AccessDeniedError) as exc:
            st.error(escape_markdown(str(exc)))
        else:
            st.session_state[CREATED_KEY] = made.secret
            st.session_state[NOTICE_KEY] = f"Token {made.id} acts as {made.email} ({scope})."
            st.rerun()
with withdraw, st.form("members_token_revoke"):
    st.markdown("**Revoke a token** (its next request is refused)")
    usable = {
        f"{t.id} · {t.email} · {t.scope} · {t.prefix}": t.id for t in listed if not t.revoked_at
    }
    picked = st.selectbox("Token", list(usable), index=None)
    if (
        st.form_submit_button("Revoke", disabled=not usable)
        and picked
        and written(revoke, usable[picked], actor=actor)
    ):
        st.session_state[NOTICE_KEY] = f"Token {usable[picked]} was revoked."
        st.rerun()

st.subheader("Audit log")
with session() as s:
    events = audit_log(session=s, actor=actor)
st.caption(f"{len(events)} event(s), newest first: sign-ins, imports, runs, member changes.")
frame = pd.DataFrame(events, columns=list(AUDIT_COLUMNS))
frame["details"] = frame["details"].map(lambda d: json.dumps(d, ensure_ascii=False))
st.dataframe(frame.head(500), hide_index=True, width="stretch")
st.download_button(
    "Download the audit log (JSONL)",
    "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events),
    file_name="audit.jsonl",
    mime="application/jsonl",
    icon=":material/download:",
)
