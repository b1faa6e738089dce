"""Review: the run's items, most doubtful first; one item with every ordering the judge saw
(docs/reviewing.md). Candidate and prompt texts are data, shown inert (:func:`show_text`). The
item and the filters live in the address (``?item=ITEM_ID&flags=...``), so a reload or a shared
link reopens them."""

from __future__ import annotations

import streamlit as st

from pages.shared import (
    DIFFERENCE_NOTE,
    answer_height,
    candidate_cells,
    ensure_app_frame,
    item_link_problem,
    page_link,
    prompt_box,
    require_dataset,
    require_run,
    run_analysis,
    search_items,
    session,
    show_code,
    show_difference,
    show_text,
    simulated_badge,
    stored_item,
)
from pcf.analysis.item_detail import (
    calls_frame,
    candidate_roles,
    consensus_frame,
    coverage_frame,
    format_number,
    item_decision,
    ordering_frame,
    ordering_label,
)
from pcf.analysis.item_list import ADJUDICATED_FILTERS, filter_items, list_view, neighbours
from pcf.analysis.markdown import escape_markdown
from pcf.analysis.results import run_weights
from pcf.flags import FLAG_HELP, FLAGS
from pcf.items import candidate_labels, candidate_titles
from pcf.labelling.adjudications import history_frame
from pcf.reports.charts import HEATMAP_VALUES, ordering_heatmap
from pcf.store import adjudication_history, call_request, item_calls, labelled_item_counts

ITEM_KEY = "item"  # the item picker's key and query parameter (kept in step by hand: a bound
# widget leaves its default out of the address, and the first item of the list is the default)
LISTED = 1000  # rows of the item list sent to the browser
CANDIDATE_HEIGHT = 420


ensure_app_frame()
st.title("Review")

with session() as s:
    dataset = require_dataset(s)
    run = require_run(s)
    labelled = labelled_item_counts(dataset.id, session=s)
simulated_badge(run)
table = run_analysis(run).table

filters = st.expander("Filters and the item list, most doubtful first")
with filters:
    columns = st.columns([3, 2, 2, 2])
    flags = columns[0].multiselect(
        "Flags (any of)",
        FLAGS,
        key="flags",
        bind="query-params",
        help="\n".join(f"- **{flag}**: {FLAG_HELP[flag]}" for flag in FLAGS),
    )
    buckets = columns[1].multiselect(
        "Bucket", sorted(table["bucket"].dropna().unique()), key="bucket", bind="query-params"
    )
    adjudicated = columns[2].selectbox(
        "Adjudicated", ADJUDICATED_FILTERS, key="adjudicated", bind="query-params"
    )
    overrides_only = columns[3].toggle(
        "Overrides direct only",
        key="overrides",
        bind="query-params",
        help=FLAG_HELP["overrides_direct"],
    )
    search = st.text_input(
        "Search",
        key="search",
        bind="query-params",
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
keys: list[str] = list(rows["item_id"])
with filters:
    st.dataframe(
        list_view(rows.head(LISTED), labelled), hide_index=True, height=220, key="review_list"
    )
    if len(rows) > LISTED:
        st.caption(f"The {LISTED:,} most doubtful are listed; filter or search to narrow.")

known, matched = set(table["item_id"]), set(keys)
if (requested := st.query_params.get(ITEM_KEY)) in known:
    st.session_state[ITEM_KEY] = requested  # the address wins: a shared link, a reload
elif requested:
    item_link_problem(requested, dataset)
opened = st.session_state.get(ITEM_KEY)  # the item open so far stays, even if filtered out
outside = [opened] if isinstance(opened, str) and opened in known - matched else []
options = outside + keys
if not options:
    st.info("No item matches these filters.")
    st.stop()
facts = table.set_index("item_id")


def go_to(key: str | None = None) -> None:
    """Put item ``key`` (Previous, Next), else the one picked, in the address the next run opens."""
    st.query_params[ITEM_KEY] = key or st.session_state[ITEM_KEY]


navigation = st.columns([1.5, 6, 1.5], vertical_alignment="bottom")
current = navigation[1].selectbox(
    f"Item: {len(keys)} of {len(table)} match the filters, most doubtful first",
    options,
    key=ITEM_KEY,
    on_change=go_to,
)
st.query_params[ITEM_KEY] = current  # always in the address, so a link reopens this item
before, after = neighbours(keys, current)
for cell, text, icon, target in (
    (navigation[0], "Previous", "arrow_back", before),
    (navigation[2], "Next", "arrow_forward", after),
):
    cell.button(
        text,
        icon=f":material/{icon}:",
        disabled=target is None,
        on_click=go_to,
        args=(target,),
        shortcut=text[0],
        width="stretch",
    )

if current in outside:
    st.caption("This item is outside the filters; Next goes to the first item that matches.")
row = facts.loc[current]
with session() as s:
    item = stored_item(int(row["db_id"]), s)
    calls = item_calls(run.id, int(row["db_id"]), session=s)
    history = adjudication_history(int(row["db_id"]), session=s)
labels = candidate_labels(item)
titles = candidate_titles(item)


def title_of(candidate_id: str | None) -> str:
    """A candidate's letter and first words, escaped for Markdown; ``—`` for none."""
    return escape_markdown(titles[candidate_id]) if candidate_id in titles else "—"


why, heatmap_column = st.columns([2, 3], gap="large")
with why:
    st.subheader(f"Item {escape_markdown(item.item_id)}")
    st.markdown(
        f"**PCF winner**: {title_of(row['winner'])}  \n"
        f"**Direct winner**: {title_of(row['direct_winner'])}  \n"
        f"**Gold**: {title_of(item.gold)}"
    )
    raised = [flag for flag in FLAGS if row[flag]]
    for flag in raised:
        st.markdown(f":orange-badge[{flag}] {FLAG_HELP[flag]}")
    if not raised:
        st.markdown(":green-badge[no flag] Every ordering agreed, with a clear margin.")
    st.caption(
        f"Review priority {format_number(row['priority'], '.2f')} · top agreement "
        f"{format_number(row['top_agreement'], '.0%')} · margin "
        f"{format_number(row['margin'], '.3f')} · {row['n_ok']} of {row['n_calls']} calls ok"
        + (f" · bucket {escape_markdown(item.bucket)}" if item.bucket else "")
    )
    page_link(
        "pages/adjudicate.py",
        label="Label this item",
        icon=":material/how_to_vote:",
        query_params={"label": item.item_id},
    )
with heatmap_column:
    if run.protocol == "apoc":
        st.caption("Pairwise (APOCJudge) runs have no per-ordering ranking; see the calls below.")
    else:
        value = st.segmented_control(
            "Every ordering the judge saw, coloured by",
            list(HEATMAP_VALUES),
            format_func=lambda key: HEATMAP_VALUES[key],
            default="rank",
            required=True,
            key="review_heatmap_value",
            persist_state="session",
        )
        heatmap = ordering_frame(item, calls)
        st.altair_chart(ordering_heatmap(heatmap, value))

winners = [row["winner"], row["direct_winner"]]
if winners[0] != winners[1] and all(w in titles for w in winners):
    st.markdown("##### The two winners")
    st.caption(DIFFERENCE_NOTE)
    show_difference(
        [
            (f"**{who}**: {title_of(w)}", item.text_of(w))
            for who, w in zip(("PCF", "Direct"), winners, strict=True)
        ],
        key="review_whole",
    )
plain = prompt_box(item, 240, short=600)
st.markdown("##### Candidates")
box_height = answer_height([c.text for c in item.candidates], CANDIDATE_HEIGHT)
for cell, candidate in zip(candidate_cells(len(item.candidates)), item.candidates, strict=True):
    with cell.container(border=True, height=box_height):
        roles = candidate_roles(candidate.id, row["winner"], row["direct_winner"], item.gold)
        badges = " ".join(f":blue-badge[{role}]" for role in roles)
        st.markdown(f"**{labels[candidate.id]}** {badges}")
        show_text(candidate.text, plain, f"{item.metadata['db_id']}:{candidate.id}")

st.markdown("##### Consensus")
weights = run_weights(run)
ws, wb, wv, wu = weights.as_tuple()
st.caption(
    f"C = {ws:.2f}·S + {wb:.2f}·B + {wv:.2f}·V + {wu:.2f}·U, averaged over executions. S: mean "
    "factuality/10; B: Borda score; V: share of top picks; U: 1 - hallucination risk."
)
st.dataframe(
    consensus_frame(item, item_decision(item, calls, weights) if run.protocol != "apoc" else None),
    hide_index=True,
    key="review_consensus",
)

st.markdown("##### Calls")
st.dataframe(calls_frame(item, calls), hide_index=True, key="review_calls")
with st.expander("Raw prompt and response of a call"):
    picked = st.selectbox(
        "Call",
        range(len(calls)),
        format_func=lambda i: (
            f"{ordering_label(calls[i], labels)} · {'ok' if calls[i].ok else 'failed'}"
        ),
        key="review_raw_call",
    )
    if picked is not None:
        call = calls[picked]
        with session() as s:
            request = call_request(call, session=s)
        verified = call.sent(request)
        st.caption(
            f"{call.input_tokens} input and {call.output_tokens} output tokens, "
            f"{call.latency_s:.2f} s, {call.attempts} attempt(s)"
            + (f", answered from the cache (call {call.cached_from})" if call.cached_from else "")
            + ("" if call.ok else f"; failed: {escape_markdown(call.error or 'unknown')}")
            + ("; request verified: it hashes to the digest of the one sent" if verified else "")
        )
        if not verified:
            st.warning(
                "The request below does not hash to the digest stored when it was sent: "
                "it may differ from what the judge received."
            )
        shown = f"call {call.id}"
        show_code(request["system"], f"{shown}:system")
        show_code(request["user"], f"{shown}:user")
        show_code(call.response_text or "(no response)", f"{shown}:response", "json")
if run.protocol != "apoc":
    with st.expander("Slot coverage and the heatmap's data"):
        st.caption("How often each candidate was shown in each slot.")
        st.dataframe(coverage_frame(item, calls), key="review_slot_coverage")
        st.dataframe(heatmap, hide_index=True, key="review_heatmap_data")

if history:
    st.markdown("##### Human labels")
    st.dataframe(history_frame(history, labels), hide_index=True, key="review_history")
