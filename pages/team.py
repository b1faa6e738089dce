"""Team: the labelling plan, each person's progress, pace and agreement (docs/reviewing.md)."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from pages.shared import (
    current_run,
    ensure_app_frame,
    require_dataset,
    require_permission,
    run_analysis,
    session,
    show_text,
    written,
)
from pcf.access import Permission, Role
from pcf.analysis.markdown import escape_markdown
from pcf.evaluation import FEW_ITEMS, on_items
from pcf.labelling.adjudications import adjudication_queue, item_index, with_priority
from pcf.labelling.human_gold import GOLD_RULE_TEXT, dataset_gold, needs_more_labels, rule_text
from pcf.labelling.plan import GOLD_RULES, MAX_LABELS_PER_ITEM, labelling_plan, set_plan
from pcf.labelling.queue import assign, assignment_progress, labels_wanted, queue_left, unassign
from pcf.labelling.team_figures import (
    agreement_by_bucket,
    annotator_checks,
    completion,
    kappa_matrix,
    people,
)
from pcf.store import (
    adjudication_records,
    current_labels,
    holders_by_item,
    item_positions,
    items_named,
    labellers_by_item,
    list_members,
    utc_now,
)

ensure_app_frame()
actor = require_permission(Permission.SEE_RESULTS)
st.title("Team")

with session() as s:
    dataset = require_dataset(s)
    run = current_run(s)
    plan = labelling_plan(dataset.id, session=s)
    order = [(key, db_id) for key, db_id, _ in item_positions(dataset.id, session=s)]
    labels = current_labels(dataset.id, session=s)
    labelled = items_named(dataset.id, labels["item_key"].unique(), session=s, texts=False)
    history = pd.DataFrame(adjudication_records(dataset.id, session=s))
    human = dataset_gold(dataset.id, session=s)
    table = run_analysis(run).table if run is not None else None
    keys = [key for key, _ in order]
    wanted = labels_wanted(plan, keys, needs_more_labels(table, labels) if plan.adaptive else keys)
    left = queue_left(
        dataset.id, order, session=s, people=sorted(labels["annotator"].unique()), wanted=wanted
    )
    by_db_id = {db_id: key for key, db_id in order}
    counts = {by_db_id[i]: len(p) for i, p in labellers_by_item(dataset.id, session=s).items()}
    held = [by_db_id[i] for i in holders_by_item(dataset.id, session=s, now=utc_now())]
    shares = assignment_progress(dataset.id, session=s)
    index = item_index(dataset.id, session=s)
    labellers = [m.email for m in list_members(session=s) if m.role != Role.VIEWER]

st.markdown(
    f"**Plan of {escape_markdown(dataset.name)}**: {plan.labels_per_item} label(s) per item"
    + (", more only where labels disagree or the item is flagged" if plan.adaptive else "")
    + f"; gold: {GOLD_RULE_TEXT[plan.gold_rule]}"
    + (f"; a random {plan.calibration_share:.0%} first" if plan.calibration_share else "")
    + "."
)
if actor.may(Permission.PLAN_LABELLING):
    with st.expander("Change the plan", icon=":material/edit:"), st.form("team_plan"):
        n = st.number_input("Labels per item", 1, MAX_LABELS_PER_ITEM, plan.labels_per_item)
        adaptive = st.toggle(
            "Ask for the labels after the first only where needed",
            plan.adaptive,
            help="Where the labels so far disagree with each other or with the PCF decision, "
            "or the item carries an instability flag.",
        )
        rule = st.selectbox("Gold rule", GOLD_RULES, index=GOLD_RULES.index(plan.gold_rule))
        share = st.number_input(
            "Random calibration share",
            0.0,
            1.0,
            plan.calibration_share,
            help="Labelled first, regardless of doubt: the random sample `pcf escalate` "
            "calibrates on.",
        )
        guidelines = st.text_area("Guidelines (Markdown)", plan.guidelines, height=200)
        if st.form_submit_button("Save the plan", type="primary") and written(
            set_plan,
            dataset.id,
            actor=actor,
            labels_per_item=int(n),
            adaptive=adaptive,
            gold_rule=rule,
            guidelines=guidelines,
            calibration_share=share,
        ):
            st.rerun()
if actor.may(Permission.ASSIGN):
    with st.expander("Assign items", icon=":material/assignment_ind:"), st.form("team_assign"):
        to = st.selectbox("To", labellers)
        first = st.number_input(
            "The most doubtful free items, how many", 0, len(keys), min(10, len(keys))
        )
        named = st.text_input("Or these item ids", placeholder="comma-separated")
        given, taken = st.columns(2)
        if given.form_submit_button("Assign", type="primary") and to:
            ranked = with_priority(index, table)
            ids = dict(order)
            doubtful_first = [(k, ids[k]) for k in adjudication_queue(ranked, ())]
            chosen = [k.strip() for k in named.split(",") if k.strip()]
            if written(
                assign,
                dataset.id,
                doubtful_first,
                actor=actor,
                to=to,
                items=chosen,
                first=int(first),
            ):
                st.rerun()
        if (
            taken.form_submit_button("Take back their items")
            and to
            and written(unassign, dataset.id, to, actor=actor)
        ):
            st.rerun()
if shares:
    st.markdown(
        "**Assigned**: "
        + ", ".join(f"{escape_markdown(p)} {x} of {n}" for p, (x, n) in sorted(shares.items()))
    )
if plan.guidelines:
    with st.expander("Guidelines", icon=":material/menu_book:"):
        show_text(plan.guidelines, plain=False, key=f"guidelines:{dataset.id}")

done = completion(keys, counts, wanted, held)
columns = st.columns(4)
columns[0].metric("Items complete", done["complete"], help="Every label the plan asks for.")
columns[1].metric("In progress", done["in_progress"], help="Some labels, or held by someone.")
columns[2].metric("Untouched", done["untouched"])
columns[3].metric("Human gold", len(human.known()), help=rule_text(human.rule))

if labels.empty:
    st.info("No label yet on this dataset.")
    st.stop()

st.subheader("People")
resolved = {k: v for k, v in human.gold.items() if human.source[k] == "resolution" and v}
progress = people(labels, history, resolved).assign(
    items_left=lambda t: t["annotator"].map(left).fillna(0).astype(int)
)
checks = annotator_checks(labels, {item.item_id: item for item in labelled})
progress = progress.merge(checks, on="annotator", how="left")
st.dataframe(
    progress,
    hide_index=True,
    width="stretch",
    column_config={
        "annotator": st.column_config.TextColumn("person"),
        "labels": st.column_config.NumberColumn(help="Items labelled (current labels)"),
        "corrections": st.column_config.NumberColumn(help="Labels saved again on an item"),
        "median_seconds": st.column_config.NumberColumn(
            "s / label", format="%.0f", help="Median time between saves, pauses over 10 min out"
        ),
        "agreement_with_others": st.column_config.NumberColumn(
            "agrees with others", format="percent", help="On items someone else labelled too"
        ),
        "shared_items": st.column_config.NumberColumn("shared items"),
        "resolved_items": st.column_config.NumberColumn("resolved items"),
        "agreement_with_resolved_gold": st.column_config.NumberColumn(
            "agrees with resolved gold", format="percent"
        ),
        "estimated_accuracy": st.column_config.NumberColumn(
            "estimated accuracy",
            format="percent",
            help="Spammer-aware Dawid-Skene (MACE): the expected share of their labels that "
            "are right",
        ),
        "favourite_position_share": st.column_config.NumberColumn(
            "favourite position",
            format="percent",
            help="Share of their choices at the position they choose most, as shown or listed",
        ),
        "flag": st.column_config.TextColumn(
            help="'answers one position' (90% of 10+ choices) or 'disagrees with everyone' "
            "(agrees with each other person no more than chance)"
        ),
        "items_left": st.column_config.NumberColumn("left in queue"),
    },
)

st.subheader("Agreement")
candidates = {item.item_id: len(item.candidate_ids) for item in labelled}
kappas = kappa_matrix(labels, candidates)
pairs = kappas["first"] != kappas["second"]
kappas["shown"] = [  # each pair's figure with its n; a person's own cell, how many they labelled
    f"{k:.2f} · n={n}" if pair and not pd.isna(k) else (f"n={n}" if pair else f"{n} labelled")
    for k, n, pair in zip(kappas["kappa"], kappas["items"], pairs, strict=True)
]
chart = (
    alt.Chart(kappas)
    .mark_rect()
    .encode(
        x=alt.X("first:N", title=None),
        y=alt.Y("second:N", title=None),
        color=alt.Color("kappa:Q", scale=alt.Scale(domain=[-1, 1], scheme="redblue")),
        tooltip=["first", "second", alt.Tooltip("kappa:Q", format=".2f"), "items"],
    )
)
text = chart.mark_text().encode(text="shown:N", color=alt.value("black"))
st.altair_chart(chart + text, width="stretch")
st.caption(
    "Chance-corrected agreement of each pair over the items both labelled (n): (agreement - "
    "chance) / (1 - chance), chance the mean of one over each item's candidates, so no naming "
    "of the candidates changes it ('cannot tell' left out; blank with fewer than two shared "
    f"items). A figure on fewer than {FEW_ITEMS} items is too few to read."
)
shared = kappas[kappas["first"] < kappas["second"]]
st.dataframe(
    shared.assign(n=shared["items"].map(on_items))[["first", "second", "kappa", "n"]],
    hide_index=True,
    column_config={
        "kappa": st.column_config.NumberColumn("agreement (chance-corrected)", format="%.3f"),
        "n": st.column_config.TextColumn(help="Items both labelled: what the figure counts"),
    },
)
buckets = agreement_by_bucket(labels, candidates, {i.item_id: i.bucket for i in labelled})
st.dataframe(
    buckets.assign(n=buckets["items"].map(on_items))[["bucket", "kappa", "n"]],
    hide_index=True,
    column_config={
        "kappa": st.column_config.NumberColumn(
            "agreement of everyone (chance-corrected)", format="%.3f"
        ),
        "n": st.column_config.TextColumn(
            help="Items two people or more labelled: the only ones the figure counts"
        ),
    },
)
