"""Review: the run's items, most doubtful first; one item with every ordering the judge saw.

Candidate and prompt texts are data, never markup: they are drawn with ``st.text`` and
``st.code`` only. ``?item=ITEM_ID`` opens an item (the Compare page links here that way).
"""

from __future__ import annotations

import streamlit as st

from pages.shared import (
    current_dataset,
    current_run,
    ensure_app_frame,
    run_analysis,
    search_items,
    session,
    simulated_badge,
)
from pcf.analysis.adjudications import history_frame
from pcf.analysis.item_detail import (
    calls_frame,
    candidate_labels,
    candidate_roles,
    consensus_frame,
    coverage_frame,
    describe_candidate,
    escape_markdown,
    format_number,
    item_decision,
    ordering_frame,
    ordering_label,
)
from pcf.analysis.item_list import ADJUDICATED_FILTERS, filter_items, list_view, neighbours
from pcf.flags import FLAG_HELP, FLAGS
from pcf.reports.charts import HEATMAP_VALUES, ordering_heatmap
from pcf.store import adjudication_history, item_calls, labelled_item_counts, load_item

ITEM_KEY = "item"  # the item picker's key, bound to the ?item= query parameter

ensure_app_frame()
st.title("Review")
st.caption(
    "The run's items, most doubtful first. Filter the list, open an item, and see how the "
    "judge ranked its candidates under every ordering."
)

with session() as s:
    dataset = current_dataset(s)
    run = current_run(s)
    labelled = labelled_item_counts(dataset.id, session=s) if dataset else {}
if dataset is None or run is None:
    st.info("No run to review: build the demo (`pcf demo`) or start a run on the Runs page.")
    st.stop()
simulated_badge(run)
table = run_analysis(run).table

with st.container(border=True):
    columns = st.columns([3, 2, 2, 2])
    flags = columns[0].multiselect(
        "Flags (any of)",
        FLAGS,
        key="review_flags",
        persist_state="session",
        help="\n".join(f"- **{flag}**: {FLAG_HELP[flag]}" for flag in FLAGS),
    )
    buckets = columns[1].multiselect(
        "Bucket",
        sorted(table["bucket"].dropna().unique()),
        key="review_buckets",
        persist_state="session",
    )
    adjudicated = columns[2].selectbox(
        "Adjudicated", ADJUDICATED_FILTERS, key="review_adjudicated", persist_state="session"
    )
    overrides_only = columns[3].toggle(
        "Overrides direct only",
        key="review_overrides",
        persist_state="session",
        help=FLAG_HELP["overrides_direct"],
    )
    search = st.text_input(
        "Search",
        key="review_search",
        persist_state="session",
        placeholder="words in the item id, prompt or any candidate",
    ).strip()

rows = filter_items(
    table,
    flags=flags,
    overrides_only=overrides_only,
    buckets=buckets,
    adjudicated=adjudicated,
    labelled=labelled.keys(),
    matching=search_items(dataset, search) if search else None,
)
keys = list(rows["item_id"])
st.caption(f"{len(keys)} of {len(table)} items match, most doubtful first.")
st.dataframe(list_view(rows, labelled), hide_index=True, height=220, key="review_list")

known, matched = set(table["item_id"]), set(keys)
outside = [
    key
    for key in dict.fromkeys([st.query_params.get(ITEM_KEY), st.session_state.get(ITEM_KEY)])
    if key in known and key not in matched
]
options = outside + keys
if not options:
    st.info("No item matches these filters.")
    st.stop()
facts = table.set_index("item_id")


def go_to(key: str) -> None:
    """Open another item (the Previous and Next buttons)."""
    st.session_state[ITEM_KEY] = key


navigation = st.columns([1.5, 6, 1.5], vertical_alignment="bottom")
current = navigation[1].selectbox("Item", options, key=ITEM_KEY, bind="query-params")
before, after = neighbours(keys, current)
navigation[0].button(
    "Previous",
    icon=":material/arrow_back:",
    disabled=before is None,
    on_click=go_to,
    args=(before,),
    shortcut="P",
    width="stretch",
)
navigation[2].button(
    "Next",
    icon=":material/arrow_forward:",
    disabled=after is None,
    on_click=go_to,
    args=(after,),
    shortcut="N",
    width="stretch",
)

if current in outside:
    st.caption("This item is outside the filters; Next goes to the first item that matches.")
row = facts.loc[current]
with session() as s:
    item = load_item(int(row["db_id"]), session=s)
    calls = item_calls(run.id, int(row["db_id"]), session=s)
    history = adjudication_history(int(row["db_id"]), session=s)
labels = candidate_labels(item)

st.subheader(f"Item {escape_markdown(item.item_id)}")
if item.bucket:
    st.caption(f"Bucket: {escape_markdown(item.bucket)}")
columns = st.columns(6)
columns[0].metric("PCF winner", describe_candidate(row["winner"], labels))
columns[1].metric("Direct winner", describe_candidate(row["direct_winner"], labels))
columns[2].metric("Gold", describe_candidate(item.gold, labels))
columns[3].metric("Review priority", format_number(row["priority"], ".2f"))
columns[4].metric("Top agreement", format_number(row["top_agreement"], ".0%"))
columns[5].metric("Margin", format_number(row["margin"], ".3f"))
raised = [flag for flag in FLAGS if row[flag]]
for flag in raised:
    st.markdown(f":orange-badge[{flag}] {FLAG_HELP[flag]}")
if not raised:
    st.markdown(":green-badge[no flag] Every ordering agreed, with a clear margin.")
st.page_link(
    "pages/adjudicate.py",
    label="Label this item",
    icon=":material/how_to_vote:",
    query_params={"label": item.item_id},
)

st.markdown("##### Prompt")
with st.container(border=True):
    st.text(item.prompt)
st.markdown("##### Candidates")
for candidate in item.candidates:
    with st.container(border=True):
        roles = candidate_roles(candidate.id, row["winner"], row["direct_winner"], item.gold)
        badges = " ".join(f":blue-badge[{role}]" for role in roles)
        st.markdown(f"**{labels[candidate.id]}** · {escape_markdown(candidate.id)} {badges}")
        st.text(candidate.text)

st.markdown("##### Consensus")
st.caption(
    "C = 0.50·S + 0.25·B + 0.20·V + 0.05·U, averaged over executions. S: mean factuality/10; "
    "B: Borda score; V: share of top picks; U: 1 - hallucination risk."
)
st.dataframe(
    consensus_frame(item, item_decision(item, calls) if run.protocol != "apoc" else None),
    hide_index=True,
    key="review_consensus",
)

st.markdown("##### Every ordering")
if run.protocol != "apoc":
    value = st.segmented_control(
        "Colour by",
        list(HEATMAP_VALUES),
        format_func=HEATMAP_VALUES.get,
        default="rank",
        required=True,
        key="review_heatmap_value",
        persist_state="session",
    )
    heatmap = ordering_frame(item, calls)
    st.altair_chart(ordering_heatmap(heatmap, value))
    with st.expander("Heatmap data"):
        st.dataframe(heatmap, hide_index=True, key="review_heatmap_data")
    st.caption("Slot coverage: how often each candidate was shown in each slot.")
    st.dataframe(coverage_frame(item, calls), key="review_slot_coverage")
st.dataframe(calls_frame(item, calls), hide_index=True, key="review_calls")
for call in calls:
    status = "ok" if call.ok else f"failed: {escape_markdown(call.error or 'unknown')}"
    with st.expander(f"Raw prompt and response · {ordering_label(call, labels)} · {status}"):
        st.caption(
            f"{call.input_tokens} input and {call.output_tokens} output tokens, "
            f"{call.latency_s:.2f} s, {call.attempts} attempt(s)"
            + (f", answered from the cache (call {call.cached_from})" if call.cached_from else "")
        )
        st.code(call.request.get("system", ""), language=None, wrap_lines=True)
        st.code(call.request.get("user", ""), language=None, wrap_lines=True)
        st.code(call.response_text or "(no response)", language="json", wrap_lines=True)

if history:
    st.markdown("##### Human labels")
    st.dataframe(history_frame(history, labels), hide_index=True, key="review_history")
