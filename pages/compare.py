"""Compare: humans against direct and PCF on the adjudicated items, and annotator agreement."""

from __future__ import annotations

import streamlit as st

from pages.shared import (
    change_in_points,
    ensure_app_frame,
    page_link,
    require_dataset,
    require_run,
    run_analysis,
    session,
    simulated_badge,
)
from pcf.analysis.agreement import table_human_comparison
from pcf.analysis.markdown import escape_markdown
from pcf.analysis.results import interval, p_value
from pcf.evaluation import FEW_ITEMS, on_items
from pcf.items import candidate_titles
from pcf.labelling.adjudications import adjudications_csv, adjudications_jsonl, choice_label
from pcf.labelling.human_gold import dataset_gold, rule_text
from pcf.store import adjudication_records, current_labels, items_named

MAX_LISTED = 100
CHANCE_NOTE = (
    "Chance-corrected agreement is (agreement - chance) / (1 - chance), chance the mean over the "
    "items of one over the item's candidates: it does not depend on how candidates are named."
)

ensure_app_frame()
st.title("Compare")
st.caption(
    "Humans against the judge: the selected run's direct and PCF decisions on adjudicated items."
)

with session() as s:
    dataset = require_dataset(s)
    run = require_run(s)
    labels = current_labels(dataset.id, session=s)
    human = dataset_gold(dataset.id, session=s)
    records = adjudication_records(dataset.id, session=s)
comparison = table_human_comparison(run_analysis(run).table, labels, human.gold)

simulated_badge(run)
st.caption(
    f"Run **{escape_markdown(run.name)}** on dataset **{escape_markdown(dataset.name)}**. "
    + rule_text(human.rule)
    + " Human gold from: "
    + (", ".join(f"{source} {n}" for source, n in human.source_counts().items()) or "none yet")
    + "."
    + (
        f" {len(human.single_label)} of the gold items rest on a single label."
        if human.single_label
        else ""
    )
    + (
        f" {len(human.waiting)} labelled item(s) wait for the plan's labels and are not counted."
        if human.waiting
        else ""
    )
)

if comparison.adjudicated == 0:
    st.info("No item of this dataset is adjudicated yet: label some items first.")
    page_link("pages/adjudicate.py", label="Go to Adjudicate", icon=":material/how_to_vote:")
    st.stop()


def number(value: float | None) -> str:
    """A statistic with three decimals, or a dash when undefined."""
    return "—" if value is None else f"{value:.3f}"


paired = comparison.paired
counts = st.columns(4)
counts[0].metric("Adjudicated items", comparison.adjudicated)
counts[1].metric("With a human label", len(comparison.rows))
counts[2].metric("Unresolved", len(comparison.unresolved), help="Ties or no candidate chosen.")
agree, compared = comparison.gold_agreement
counts[3].metric(
    "Humans agree with gold",
    f"{agree} / {compared}" if compared else "—",
    help="Human labels equal to the dataset's gold id, where both exist.",
)

st.subheader("Judge against humans")
if paired is None:
    st.info("No adjudicated item has a human label yet (see the rule above).")
else:
    versus_humans = st.columns(4)
    versus_humans[0].metric("Direct accuracy", f"{paired['direct_accuracy']:.1%}")
    versus_humans[1].metric(
        "PCF accuracy",
        f"{paired['method_accuracy']:.1%}",
        **change_in_points(paired["delta_points"], "pts"),
    )
    direct, pcf = comparison.direct, comparison.pcf
    assert direct is not None
    assert pcf is not None
    versus_humans[2].metric("Chance-corrected agreement, direct", number(direct.kappa))
    versus_humans[3].metric("Chance-corrected agreement, PCF", number(pcf.kappa))
    if paired["n"] < FEW_ITEMS:
        st.warning(
            f"These figures count {on_items(paired['n'])}: read them as anecdotes, not rates."
        )
    st.caption(
        f"On {paired['n']} items: PCF improved {paired['improved']}, regressed "
        f"{paired['regressed']}, same {paired['same']}; exact McNemar p = "
        f"{p_value(paired['mcnemar_p'])}; 95% paired bootstrap CI of the difference "
        f"{interval(paired['ci_points'])} points. Exact 95% intervals of the accuracy: direct "
        f"[{direct.low:.1%}, {direct.high:.1%}], PCF [{pcf.low:.1%}, {pcf.high:.1%}]; chance "
        f"{pcf.chance:.1%}. {CHANCE_NOTE} Direct is the canonical call of the same run."
    )
    if human.single_label:
        rows = comparison.rows
        two = rows[rows["annotators"] >= 2]
        st.caption(
            f"{len(human.single_label)} gold item(s) rest on one label: under the adaptive plan "
            "one label is gold only where no second was asked for, where it agreed with the "
            "judge and raised no flag, so accuracy read on them leans towards the judge. "
            + (
                f"On the {len(two)} items with two labels or more, PCF accuracy is "
                f"{two['pcf_correct'].mean():.1%}."
                if len(two)
                else "No item has two labels yet."
            )
        )

st.subheader("Agreement between annotators")
agreement = comparison.agreement
between_annotators = st.columns(3)
between_annotators[0].metric("Annotators", agreement.annotators)
between_annotators[1].metric("Items labelled by two or more", agreement.items)
figure = agreement.figure
between_annotators[2].metric(
    "Chance-corrected agreement",
    number(None if figure is None else figure.kappa),
    help=f"Counts the items labelled by two people or more: {on_items(agreement.items)}.",
)
if 0 < agreement.items < FEW_ITEMS:
    st.warning(f"Agreement between annotators counts {on_items(agreement.items)}.")
st.caption(
    "Per item, the share of pairs of people who chose the same answer ('none_correct' is an "
    "answer, 'cannot_tell' no label), averaged over the items two or more labelled"
    + (f" ({figure.share:.1%}, chance {figure.chance:.1%}). " if figure else ". ")
    + CHANCE_NOTE
    + (f" Not measured: {agreement.note}." if agreement.note else "")
)

st.subheader("Disagreements")
disagreements = comparison.disagreements()
if disagreements.empty:
    st.success("Direct and PCF agree with the human label on every labelled item.")
else:
    st.caption(
        f"{len(disagreements)} item(s) where direct or PCF differs from the human label. "
        "Open one on the Review page."
    )
    header = st.columns([2, 2, 2, 2, 2])
    for col, title in zip(header, ("Item", "Human", "Direct", "PCF", "Gold"), strict=True):
        col.markdown(f"**{title}**")
    mark = {True: "✓", False: "✗"}
    listed = disagreements.head(MAX_LISTED)
    with session() as s:
        shown = items_named(dataset.id, listed["item_id"], session=s)
    titles = {item.item_id: candidate_titles(item) for item in shown}

    def named(item_id: str, choice: str | None, none: str) -> str:
        """A candidate as its letter and differing words, a choice's name, or ``none``."""
        if not choice:
            return none
        return escape_markdown(titles[item_id].get(choice) or choice_label(choice, {}))

    for row in listed.itertuples(index=False):
        cells = st.columns([2, 2, 2, 2, 2])
        with cells[0]:
            page_link(
                "pages/review.py",
                label=escape_markdown(str(row.item_id)),
                icon=":material/open_in_new:",
                query_params={"item": row.item_id},
            )
        cells[1].markdown(named(row.item_id, row.human, "—"))
        for cell, choice, right in (
            (cells[2], row.direct, row.direct_correct),
            (cells[3], row.pcf, row.pcf_correct),
        ):
            cell.markdown(f"{named(row.item_id, choice, 'abstained')} {mark[right]}")
        cells[4].markdown(named(row.item_id, row.gold, "—"))
    if len(disagreements) > MAX_LISTED:
        st.caption(f"The first {MAX_LISTED} are listed.")
if comparison.unresolved:
    st.caption("Unresolved items: " + ", ".join(map(escape_markdown, comparison.unresolved)))

st.subheader("Export adjudications")
st.caption(
    f"All {len(records)} adjudication rows of the dataset, corrections included, oldest first."
)
downloads = (
    ("csv", adjudications_csv, "text/csv"),
    ("jsonl", adjudications_jsonl, "application/jsonl"),
)
for cell, (suffix, write, mime) in zip(st.columns([1, 1, 3]), downloads, strict=False):
    cell.download_button(
        f"Download {suffix.upper()}",
        data=write(records),
        file_name=f"{dataset.name}-adjudications.{suffix}",
        mime=mime,
        icon=":material/download:",
    )
