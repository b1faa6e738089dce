"""Members: who may sign in and as what, and the audit log (admins only)."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from pages.shared import engine, ensure_app_frame, require_permission, session, written
from pcf.access import Permission, Role
from pcf.analysis.markdown import escape_markdown
from pcf.labelling.audit import AUDIT_COLUMNS, audit_log
from pcf.labelling.membership import add_member, members, remove_member
from pcf.store import session_scope

NOTICE_KEY = "members_notice"  # what the last change did, shown after the rerun it causes

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
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "email": m.email,
                    "role": m.role,
                    "added by": m.added_by,
                    "added": m.added_at,
                    "signs in at": m.issuer,
                }
                for m in everyone
            ]
        ),
        hide_index=True,
        width="stretch",
    )
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
