"""Resolve: a reviewer's queue of items whose labels disagree; each person's choice side by
side with the candidates' text, and "Set gold", which records a resolution (who, when, choice,
reason) and never changes a vote."""

from __future__ import annotations

import streamlit as st

from pages.shared import (
    current_run,
    engine,
    ensure_app_frame,
    require_dataset,
    require_permission,
    run_analysis,
    search_items,
    session,
    show_text,
    stored_item,
)
from pcf.access import Permission
from pcf.analysis.item_detail import describe_candidate
from pcf.analysis.markdown import escape_markdown
from pcf.items import NONE_CORRECT, candidate_titles
from pcf.labelling.adjudications import choice_label, confidence_label
from pcf.labelling.human_gold import disagreements
from pcf.labelling.resolutions import resolve
from pcf.store import current_labels, item_db_ids, resolutions, session_scope

PICK_KEY = "resolve_item"
DONE_KEY = "resolve_done"  # the item just resolved, and its gold, for the notice

ensure_app_frame()
actor = require_permission(Permission.RESOLVE)
st.title("Resolve")
st.caption(
    "Items whose annotators disagree, and no reviewer has resolved yet. Setting gold adds a "
    "resolution; the annotators' labels stay as they are."
)

with session() as s:
    dataset = require_dataset(s)
    run = current_run(s)
    labels = current_labels(dataset.id, session=s)
    queue = disagreements(labels, resolutions(dataset.id, session=s))
    db_ids = item_db_ids(dataset.id, session=s)

if done := st.session_state.pop(DONE_KEY, None):
    st.success(f"Gold set for item {escape_markdown(done)}.")
if not queue:
    st.info("No disagreement waits for a reviewer on this dataset.")
    st.stop()
if search := st.text_input(
    "Find an item", placeholder="an item id or words of its prompt or answers", key="resolve_find"
):
    found = search_items(dataset, search)
    queue = [key for key in queue if key in found]
    if not queue:
        st.info(f"No disagreement to resolve holds {escape_markdown(repr(search))}.")
        st.stop()

picked = st.selectbox(
    f"{len(queue)} disagreement(s) to resolve", queue, key=PICK_KEY, help="In item order."
)
with session() as s:
    item = stored_item(db_ids[picked], s)
titles = candidate_titles(item)
mine = labels[labels["item_key"] == picked]

st.subheader(f"Item {escape_markdown(item.item_id)}")
with st.container(border=True):
    show_text(item.prompt, plain=False, key=f"{db_ids[picked]}:prompt")
votes = st.columns(max(len(mine), 1))
for column, row in zip(votes, mine.itertuples(index=False), strict=False):
    with column.container(border=True):
        st.markdown(f"**{escape_markdown(row.annotator)}**")
        st.markdown(escape_markdown(choice_label(row.choice, titles)))
        st.caption(f"confidence {confidence_label(row.confidence)}")
        if row.tags:
            st.caption("tags: " + escape_markdown(", ".join(row.tags)))
        if row.notes:
            show_text(row.notes, plain=False, key=f"{db_ids[picked]}:notes:{row.annotator}")
if run is not None:
    table = run_analysis(run).table.set_index("item_id")
    if picked in table.index:
        decided = table.loc[picked]
        st.caption(
            f"Run {escape_markdown(run.name)}: PCF winner "
            f"{escape_markdown(describe_candidate(decided['winner'], titles))}, direct "
            f"{escape_markdown(describe_candidate(decided['direct_winner'], titles))}."
        )

for candidate in item.candidates:
    with st.expander(escape_markdown(titles[candidate.id])):
        show_text(candidate.text, plain=False, key=f"{db_ids[picked]}:{candidate.id}")

with st.form("resolve_form", clear_on_submit=True):
    options = [*item.candidate_ids, NONE_CORRECT]
    choice = st.radio(
        "Gold",
        options,
        format_func=lambda c: escape_markdown(titles.get(c) or choice_label(c, titles)),
        index=None,
    )
    reason = st.text_area("Reason", placeholder="why this answer (kept with the resolution)")
    if st.form_submit_button("Set gold", type="primary"):
        if choice is None:
            st.error("Pick the gold answer first.")
        else:
            try:
                with session_scope(engine()) as s:
                    resolve(db_ids[picked], session=s, actor=actor, choice=choice, reason=reason)
            except ValueError as exc:
                st.error(escape_markdown(str(exc)))
            else:
                st.session_state[DONE_KEY] = picked
                st.session_state.pop(PICK_KEY, None)
                st.rerun()
