"""Resolve: a reviewer's queue of items whose labels disagree (docs/reviewing.md). "Set gold"
records a resolution (who, when, choice, reason) and never changes a vote; a new resolution of a
resolved item revises the last one."""

from __future__ import annotations

from typing import Any

import streamlit as st

from pages.shared import (
    DIFFERENCE_NOTE,
    comment_thread,
    current_run,
    ensure_app_frame,
    require_dataset,
    require_permission,
    run_analysis,
    search_items,
    session,
    show_difference,
    show_text,
    stored_item,
    written,
)
from pcf.access import Permission
from pcf.analysis.item_detail import describe_candidate
from pcf.analysis.markdown import escape_markdown
from pcf.items import NONE_CORRECT, candidate_titles
from pcf.labelling.adjudications import (
    by_priority,
    choice_label,
    confidence_label,
    item_index,
    with_priority,
)
from pcf.labelling.human_gold import disagreements
from pcf.labelling.resolutions import contested, resolve
from pcf.store import current_labels, resolutions

PICK_KEY = "resolve_item"
DONE_KEY = "resolve_done"  # the item just resolved, and its gold, for the notice

ensure_app_frame()
actor = require_permission(Permission.RESOLVE)
st.title("Resolve")
st.caption(
    "Items whose annotators disagree, most doubtful first (the run's review priority, then "
    "item order). Setting gold adds a resolution; the annotators' labels stay as they are."
)

with session() as s:
    dataset = require_dataset(s)
    run = current_run(s)
    labels = current_labels(dataset.id, session=s)
    resolved = resolutions(dataset.id, session=s)
    items = item_index(dataset.id, session=s)
table = run_analysis(run).table if run is not None else None
items = with_priority(items, table)
db_ids = dict(zip(items["item_id"], items["db_id"], strict=True))

if done := st.session_state.pop(DONE_KEY, None):
    st.success(f"Gold set for item {escape_markdown(done)}.")
show_resolved = st.toggle("Resolved items", help="Items with a resolution, to read or revise.")
wanted = set(resolved["item_key"] if show_resolved else disagreements(labels, resolved))
queue = [key for key in by_priority(items)["item_id"] if key in wanted]
if not queue:
    st.info(
        "No item of this dataset is resolved yet."
        if show_resolved
        else "No disagreement waits for a reviewer on this dataset."
    )
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
    f"{len(queue)} {'resolved item(s)' if show_resolved else 'disagreement(s) to resolve'}",
    queue,
    key=PICK_KEY,
    help="Most doubtful first.",
)
with session() as s:
    item = stored_item(db_ids[picked], s)
titles = candidate_titles(item)
votes = labels[labels["item_key"] == picked]

st.subheader(f"Item {escape_markdown(item.item_id)}")
history = resolved[resolved["item_key"] == picked]
# The form comes first, so that it is in the first screen however long the answers below.
with st.form("resolve_form", clear_on_submit=True, border=True):
    options = [*item.candidate_ids, NONE_CORRECT]
    choice = st.radio(
        "Gold",
        options,
        format_func=lambda c: escape_markdown(titles.get(c) or choice_label(c, titles)),
        index=None,
        horizontal=True,
    )
    reason = st.text_input("Reason", placeholder="why this answer (kept with the resolution)")
    if st.form_submit_button("Revise gold" if len(history) else "Set gold", type="primary"):
        if choice is None:
            st.error("Pick the gold answer first.")
        elif written(resolve, db_ids[picked], actor=actor, choice=choice, reason=reason):
            st.session_state[DONE_KEY] = picked
            st.session_state.pop(PICK_KEY, None)
            st.rerun()
    if len(history):
        st.caption(f"Resolved {len(history)} time(s) before: the resolutions are at the end.")
with st.container(border=True):
    show_text(item.prompt, plain=False, key=f"{db_ids[picked]}:prompt")
if run is not None and table is not None and picked in set(table["item_id"]):
    decided = table.set_index("item_id").loc[picked]
    st.caption(
        f"Run {escape_markdown(run.name)}: PCF winner "
        f"{escape_markdown(describe_candidate(decided['winner'], titles))}, direct "
        f"{escape_markdown(describe_candidate(decided['direct_winner'], titles))}."
    )


def show_vote(vote: Any, choice: str = "") -> None:
    """One person's current label: who, the choice unless shown above, confidence, tags, note."""
    note = "".join(f" · {escape_markdown(t)}" for t in (", ".join(vote.tags), vote.notes) if t)
    st.caption(
        f"{escape_markdown(vote.annotator)}{escape_markdown(choice)} · confidence "
        f"{confidence_label(vote.confidence)}{note}"
    )


shown = contested(votes["choice"])
if shown:
    st.caption(DIFFERENCE_NOTE)
    slots = show_difference(
        [(f"**{escape_markdown(titles[c])}**", item.text_of(c)) for c in shown],
        key="resolve_whole",
    )
    for slot, cid in zip(slots, shown, strict=True):
        with slot:
            for vote in votes[votes["choice"] == cid].itertuples(index=False):
                show_vote(vote)
for vote in votes[~votes["choice"].isin(shown)].itertuples(index=False):
    show_vote(vote, f": {choice_label(vote.choice, titles)}")
for candidate in item.candidates:
    if candidate.id not in shown:
        with st.expander(escape_markdown(titles[candidate.id])):
            show_text(candidate.text, plain=False, key=f"{db_ids[picked]}:{candidate.id}")

comment_thread(db_ids[picked], actor, "resolve")

if not history.empty:
    st.markdown("##### Resolutions, oldest first")
    st.dataframe(
        history.assign(
            choice=history["choice"].map(lambda c: choice_label(c, titles)),
            created_at=history["created_at"].dt.strftime("%Y-%m-%d %H:%M:%S UTC"),
        )[["created_at", "resolved_by", "choice", "reason"]],
        hide_index=True,
        column_config={"created_at": "when", "resolved_by": "by"},
    )
