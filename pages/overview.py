"""Overview: the dataset, its runs, and what the selected run found."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from pages.shared import (
    RUN_KEY,
    change_in_points,
    current_run,
    ensure_app_frame,
    page_link,
    require_dataset,
    run_analysis,
    session,
    shared_result,
    simulated_badge,
)
from pcf.analysis.against_labels import run_overview
from pcf.analysis.escalate import escalation_in_words
from pcf.analysis.markdown import escape_markdown
from pcf.analysis.results import (
    flag_counts,
    interval,
    is_simulated,
    outcome_frame,
    p_value,
    run_judge,
    stopping_label,
)
from pcf.analysis.summary import summary_in_words
from pcf.flags import PRIORITY_HELP
from pcf.labelling.human_gold import dataset_gold, rule_text
from pcf.prices import cost_text, run_cost
from pcf.reports.charts import (
    capture_chart,
    flag_bars,
    metric_histogram,
    outcome_bars,
    slot_share_bars,
)
from pcf.store import current_labels, list_runs, run_states

ensure_app_frame()
st.title("Overview")
st.markdown(
    "An LLM judge often picks a different *most factual* answer when the same candidates are "
    "shown in another order. PCF Review asks the judge under several orderings, combines the "
    "verdicts into one **consensus**, and flags the items whose verdict depends on the order, "
    "so that people check those first."
)

with session() as s:
    dataset = require_dataset(s)
    run = current_run(s)
    runs = list_runs(session=s, dataset_id=dataset.id)
    states = run_states(runs, session=s)  # a run whose process died reads as interrupted
    labels = current_labels(dataset.id, session=s)
    human = dataset_gold(dataset.id, session=s)

simulated_badge(run)
if run is not None:
    analysis = run_analysis(run)
    table = analysis.table
    figures = shared_result(
        run_overview, run, "Measuring the run against the labels...", labels=True
    )
    comparisons = figures.comparisons
    against, stats = next(((k, v) for k, v in comparisons.items() if v), ("", None))
    with st.container(border=True, key="overview_summary"):
        st.subheader(f"Run {escape_markdown(run.name)}")
        for sentence in summary_in_words(table, stats, against, figures.triage):
            st.markdown(sentence)
        page_link(
            "pages/review.py", label="Review the most doubtful items", icon=":material/search:"
        )
    others = [r for r in runs if r.protocol == "pcf" and r.name != run.name]
    if others:
        cells = st.columns(min(len(others), 3) + 1, vertical_alignment="center")
        cells[0].caption("The same items, another judge:")
        for cell, other in zip(cells[1:], others, strict=False):
            simulated = "simulated, " if is_simulated(other) else ""
            cell.button(
                escape_markdown(f"{other.name} ({simulated}{other.model})"),
                key=f"overview_run_{other.name}",
                on_click=st.session_state.update,  # the sidebar's run follows
                kwargs={RUN_KEY: other.name},
                width="stretch",
            )

st.subheader(f"Dataset {escape_markdown(dataset.name)}")
columns = st.columns(4)
columns[0].metric("Items", dataset.n_items)
columns[1].metric("Runs", len(runs))
columns[2].metric("Items adjudicated", labels["item_key"].nunique())
columns[3].metric("Annotators", labels["annotator"].nunique())
if runs:
    st.dataframe(
        pd.DataFrame(
            {
                "run": [r.name for r in runs],
                "protocol": [r.protocol for r in runs],
                "judge": [f"{r.backend} · {r.model}" for r in runs],
                "K": [r.k for r in runs],
                "executions": [r.executions for r in runs],
                "schedule": [r.schedule for r in runs],
                "stopping": [stopping_label(r) or "full run" for r in runs],
                "status": [states[r.id] for r in runs],
                "calls": [r.calls_made for r in runs],
                "failures": [r.failures for r in runs],
                "cost": [cost_text(run_cost(r)) for r in runs],
            }
        ),
        hide_index=True,
        key="overview_runs",
    )
if run is None:
    st.info("No run selected: start one on the Runs page, then pick it in the sidebar.")
    st.stop()

st.caption(
    f"{run.protocol} protocol, {run.k} ordering(s) per item, {run.executions} execution(s), "
    f"{run.schedule} schedule; judge {escape_markdown(run_judge(run))}; "
    f"{len(table)} of {dataset.n_items} items decided."
)
if run.protocol == "direct":
    st.info(
        "This run is the direct baseline (one canonical ordering per item), so its consensus "
        "equals direct. Pick a PCF run in the sidebar to see what the orderings change."
    )

with st.expander("The statistics: does the consensus beat the direct verdict?"):
    if not any(comparisons.values()):
        st.info(
            "No item has a gold or human label yet: accuracy appears here once items are "
            "labelled on the Adjudicate page."
        )
    for name, paired in comparisons.items():
        if paired is None:
            continue
        st.markdown(
            f"**Against {name}** ({paired['n']} items): the 95% interval of the change is "
            f"{interval(paired['ci_points'])} points."
        )
        columns = st.columns(4)
        columns[0].metric("Direct accuracy", f"{paired['direct_accuracy']:.1%}")
        columns[1].metric(
            "Consensus accuracy",
            f"{paired['method_accuracy']:.1%}",
            **change_in_points(paired["delta_points"]),
        )
        columns[2].metric(
            "Improved / regressed / same",
            f"{paired['improved']} / {paired['regressed']} / {paired['same']}",
        )
        columns[3].metric("McNemar p (exact)", p_value(paired["mcnemar_p"]))
        st.altair_chart(outcome_bars(outcome_frame(paired)), height=160)
    st.caption(
        "Improved: direct was wrong and the consensus right; regressed: the reverse. The p-value "
        "is the exact McNemar test on those two counts; the interval is a paired bootstrap of "
        "items (10,000 resamples)."
        + (f" {rule_text(human.rule)}" if comparisons["human labels"] else "")
    )

st.markdown("#### How order-dependent are the verdicts?")
left, right = st.columns(2)
with left:
    st.altair_chart(
        metric_histogram(table, "priority", "review priority (higher = more doubtful)", step=0.25),
        height=260,
    )
    st.caption(PRIORITY_HELP)
with right:
    counts = flag_counts(table)
    st.altair_chart(flag_bars(counts), height=260)
st.dataframe(counts, hide_index=True, key="overview_flags")

st.markdown("#### Does the judge favour a slot?")
if analysis.slot_tests.empty:
    st.caption("Pairwise (APOCJudge) runs have no listwise slot statistics.")
for test in analysis.slot_tests.itertuples():
    slots = analysis.slot_bias[analysis.slot_bias["n"] == test.n]
    st.altair_chart(slot_share_bars(slots), height=240)
    verdict = "the judge favours some slots" if test.p_value < 0.05 else "no clear slot bias"
    st.markdown(
        f"Items with {test.n} candidates: {test.calls} ok calls; chi-square against uniform "
        f"(dashed line) = {test.chi2:.1f}, p = {test.p_value:.3g}: {verdict}."
    )
    st.dataframe(
        pd.DataFrame(
            {
                "slot": slots["slot"],
                "share of top picks": 100 * slots["top_share"],
                "top picks": slots["top_count"],
                "gold picked when shown here": 100 * slots["gold_recall"],
            }
        ),
        hide_index=True,
        column_config={
            "share of top picks": st.column_config.NumberColumn(format="%.1f%%"),
            "gold picked when shown here": st.column_config.NumberColumn(format="%.1f%%"),
        },
    )

st.markdown("#### Does reviewing the most doubtful first pay off?")
if run.protocol == "apoc":
    st.caption("Pairwise runs: see `pcf replay ... --triage` for recorded judges.")
elif figures.triage is None or figures.curves is None:
    st.caption("No gold or human labels yet: nothing to count the judge's errors against.")
else:
    triage = figures.triage
    st.altair_chart(capture_chart(figures.curves), height=300)
    orders = triage["orders"]
    cols = st.columns(len(orders) + 1)
    for col, (name, shown) in zip(cols, orders.items(), strict=False):
        col.metric(
            f"{name}: errors found at 20%",
            f"{100 * shown['caught_at']['20%']:.0f}%",
            help=f"Area under the curve {shown['capture_auc']:.2f}",
        )
    cols[-1].metric("random order: at 20%", f"{100 * triage['random']['caught_at']['20%']:.0f}%")
    st.caption(
        f"{triage['errors']} of {triage['items']} items have a wrong or no winner against "
        f"{triage['against']} labels. Reviewing them most doubtful first (review priority, "
        "or the calibrated chance that the judge is wrong, learned out of fold) finds them "
        "sooner than a random order; the grey band holds 90% of random orders."
    )

if run.protocol != "apoc":
    st.markdown("#### Which items may the judge decide alone?")
    with session() as s:
        st.markdown(escalation_in_words(run, session=s))
    st.caption(
        "`pcf escalate RUN --calibration-labels humans --queue` sends the rest to labelling."
    )

page_link("pages/review.py", label="Review the most doubtful items", icon=":material/search:")
page_link("pages/adjudicate.py", label="Label items (Adjudicate)", icon=":material/how_to_vote:")
