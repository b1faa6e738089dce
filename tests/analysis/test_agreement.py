"""Humans against the judge: human labels, accuracy, kappa, annotator agreement, export."""

from __future__ import annotations

import csv
import io
import json

import pandas as pd
import pytest

from pcf.analysis.agreement import (
    annotator_agreement,
    compare_with_humans,
    table_human_comparison,
)
from pcf.analysis.results import analyse_run, run_decisions
from pcf.labelling.adjudications import EXPORT_COLUMNS, adjudications_csv, adjudications_jsonl
from pcf.labelling.human_gold import dataset_gold, human_gold
from pcf.store import (
    add_adjudication,
    adjudication_records,
    current_labels,
    get_dataset,
    get_run,
    load_items,
)


def labels(*rows: tuple[str, str, str]) -> pd.DataFrame:
    """Current labels from (item_key, annotator, choice) rows."""
    return pd.DataFrame(rows, columns=["item_key", "annotator", "choice"])


NO_RESOLUTIONS = pd.DataFrame(columns=["item_key", "choice"])


def decision(item_id: str, winner: str | None, direct: str | None) -> dict:
    return {"item_id": item_id, "winner": winner, "metrics": {"direct_winner": direct}}


def majority(current: pd.DataFrame) -> dict[str, str | None]:
    """Human gold by the majority rule, without resolutions."""
    return human_gold(current, NO_RESOLUTIONS, rule="majority").gold


FOUR = dict.fromkeys(("i1", "i2", "i3", "i4", "i5", "i6"), 4)
"""Every item of these tests has four candidates: chance agreement is 1/4."""


def test_two_annotators_agree_beyond_chance_with_cannot_tell_as_missing():
    current = labels(
        ("i1", "ann", "a"),
        ("i1", "bob", "a"),
        ("i2", "ann", "b"),
        ("i2", "bob", "a"),
        ("i3", "ann", "none_correct"),
        ("i3", "bob", "none_correct"),
        ("i4", "ann", "b"),
        ("i4", "bob", "cannot_tell"),
        ("i5", "ann", "b"),
    )
    agreement = annotator_agreement(current, FOUR)
    assert (agreement.annotators, agreement.items) == (2, 3)
    assert agreement.figure.share == pytest.approx(2 / 3)
    assert agreement.figure.kappa == pytest.approx((2 / 3 - 1 / 4) / (3 / 4))


def test_three_annotators_agree_by_the_share_of_agreeing_pairs_per_item():
    current = labels(
        ("i1", "ann", "a"),
        ("i1", "bob", "a"),
        ("i1", "cat", "b"),
        ("i2", "ann", "b"),
        ("i2", "bob", "b"),
        ("i3", "ann", "a"),
        ("i3", "cat", "a"),
        ("i4", "bob", "c"),
    )
    agreement = annotator_agreement(current, {**FOUR, "i2": 2})
    share = (1 / 3 + 1 + 1) / 3  # i1: one of its three pairs agrees
    chance = (1 / 4 + 1 / 2 + 1 / 4) / 3
    assert agreement.items == 3
    assert agreement.figure.kappa == pytest.approx((share - chance) / (1 - chance))


def test_agreement_does_not_depend_on_how_candidates_are_named():
    """Kappa over candidate ids as categories gave 0 with ids shared by every item and 0.95
    with each item's own ids; agreement corrected per item gives one figure for both."""
    choices = [("a", "a"), ("a", "a"), ("a", "b"), ("a", "a")]
    shared_ids = labels(
        *[
            (f"i{n}", who, c)
            for n, pair in enumerate(choices, 1)
            for who, c in zip(("x", "y"), pair, strict=True)
        ]
    )
    own_ids = shared_ids.assign(choice=shared_ids["item_key"] + "-" + shared_ids["choice"])
    first, second = (annotator_agreement(current, FOUR) for current in (shared_ids, own_ids))
    assert first.figure == second.figure
    assert first.figure.kappa == pytest.approx((3 / 4 - 1 / 4) / (3 / 4))


@pytest.mark.parametrize(
    ("current", "note"),
    [
        (labels(("i1", "ann", "a"), ("i2", "ann", "b")), "needs two annotators"),
        (labels(("i1", "ann", "a"), ("i2", "bob", "b")), "no item has labels from two annotators"),
    ],
)
def test_agreement_is_not_measured_without_shared_labels(current, note):
    agreement = annotator_agreement(current, FOUR)
    assert agreement.figure is None
    assert agreement.note == note


def test_compare_counts_abstentions_as_wrong_in_accuracy_and_kappa_and_lists_disagreements():
    current = labels(
        ("i1", "ann", "a"),
        ("i2", "ann", "b"),
        ("i3", "ann", "c"),
        ("i4", "ann", "a"),
        ("i4", "bob", "b"),
    )
    decisions = [
        decision("i1", "a", "a"),
        decision("i2", "b", "a"),
        decision("i3", None, "c"),
        decision("i4", "a", "a"),
        decision("i5", "a", "a"),
    ]
    result = compare_with_humans(
        decisions,
        current,
        majority(current),
        candidates=FOUR,
        gold={"i1": "a", "i2": "a", "i3": "c"},
    )
    assert result.adjudicated == 4
    assert result.unresolved == ["i4"]
    assert result.paired["n"] == 3
    assert result.paired["direct_accuracy"] == pytest.approx(2 / 3)
    assert result.paired["method_accuracy"] == pytest.approx(2 / 3)
    assert result.paired["method_abstentions"] == 1
    assert result.disagreements()["item_id"].tolist() == ["i2", "i3"]
    assert result.direct.kappa == pytest.approx((2 / 3 - 1 / 4) / (3 / 4))
    # PCF abstained on i3: a disagreement in kappa as in accuracy, not an item left out.
    assert (result.pcf.n, result.pcf.share) == (3, pytest.approx(2 / 3))
    assert result.pcf.kappa == result.direct.kappa
    assert result.pcf.low < 2 / 3 < result.pcf.high
    assert result.gold_agreement == (2, 3)


def test_compare_without_any_human_label_has_no_figures():
    current = labels(("i1", "ann", "cannot_tell"))
    result = compare_with_humans(
        [decision("i1", "a", "a")], current, majority(current), candidates=FOUR
    )
    assert result.adjudicated == 1
    assert result.paired is None
    assert result.pcf is None
    assert result.rows.empty


def test_a_stored_run_against_current_labels_uses_each_annotators_newest_label(db):
    dataset = get_dataset("demo", session=db)
    items = load_items(dataset.id, session=db)[:6]
    for item in items:
        add_adjudication(item.metadata["db_id"], session=db, annotator="ann", choice="cannot_tell")
        add_adjudication(item.metadata["db_id"], session=db, annotator="ann", choice=item.gold)
        add_adjudication(item.metadata["db_id"], session=db, annotator="bob", choice=item.gold)
    run = get_run("demo-pcf", session=db)
    run_items = load_items(run.dataset_id, session=db)
    result = compare_with_humans(  # the run decided again, from its calls
        run_decisions(run, session=db, items=run_items),
        current_labels(run.dataset_id, session=db),
        dataset_gold(run.dataset_id, session=db).gold,
        candidates={i.item_id: len(i.candidate_ids) for i in run_items},
        gold={i.item_id: i.gold for i in run_items},
    )
    decisions = {d["item_id"]: d for d in run_decisions(run, session=db)}
    from_table = table_human_comparison(
        analyse_run(run, session=db).table,
        current_labels(dataset.id, session=db),
        dataset_gold(dataset.id, session=db).gold,
    )
    assert result.adjudicated == 6
    assert result.rows["human"].tolist() == [i.gold for i in items]
    expected = sum(decisions[i.item_id]["winner"] == i.gold for i in items) / 6
    assert result.paired["method_accuracy"] == pytest.approx(expected)
    assert result.agreement.figure.kappa == pytest.approx(1.0)
    assert result.gold_agreement == (6, 6)
    assert from_table.rows.equals(result.rows)
    assert (from_table.paired, from_table.pcf, from_table.direct) == (
        result.paired,
        result.pcf,
        result.direct,
    )
    assert (from_table.adjudicated, from_table.gold_agreement) == (6, (6, 6))


def test_exports_hold_every_adjudication_row(db):
    dataset = get_dataset("demo", session=db)
    item = load_items(dataset.id, session=db)[0]
    db_id = item.metadata["db_id"]
    add_adjudication(db_id, session=db, annotator="ann", choice=item.gold, tags=["x", "y"])
    add_adjudication(db_id, session=db, annotator="ann", choice="none_correct", notes='a, "b"')
    records = adjudication_records(dataset.id, session=db)
    assert len(current_labels(dataset.id, session=db)) == 1
    lines = [json.loads(line) for line in adjudications_jsonl(records).splitlines()]
    assert lines == records
    reader = csv.DictReader(io.StringIO(adjudications_csv(records)))
    assert tuple(reader.fieldnames) == EXPORT_COLUMNS
    rows = list(reader)
    assert [r["choice"] for r in rows] == [item.gold, "none_correct"]
    assert rows[0]["tags"] == "x;y"
    assert rows[1]["notes"] == 'a, "b"'
    assert rows[1]["supersedes"] == str(records[0]["id"])
    assert rows[0]["id"] == str(records[0]["id"])
