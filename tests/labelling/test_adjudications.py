"""Adjudication: queue, display order, confidence and history (pcf/labelling/adjudications.py)."""

from __future__ import annotations

import csv
import io
import math

import pytest
from sqlmodel import Session

from pcf.analysis.results import (
    analyse_run,
)
from pcf.labelling.adjudications import (
    CONFIDENCE_SCALE,
    EXPORT_COLUMNS,
    adjudication_queue,
    adjudications_csv,
    confidence_label,
    display_labels,
    display_order,
    history_frame,
    item_index,
    with_priority,
)
from pcf.store import (
    add_adjudication,
    adjudication_history,
    get_run,
    item_db_ids,
    load_items,
)
from tests.factories import decision_rows, demo_item


def test_the_queue_is_most_doubtful_first_without_done_and_skipped_last():
    items = decision_rows(
        [{"priority": 0.2}, {"priority": 2.0}, {"priority": math.nan}, {"priority": 1.0}, {}]
    )
    assert adjudication_queue(items, done=set()) == ["i1", "i3", "i0", "i4", "i2"]
    assert adjudication_queue(items, done={"i1"}) == ["i3", "i0", "i4", "i2"]
    assert adjudication_queue(items, done={"i1"}, skipped=["i0", "i3", "i0", "i1"]) == [
        "i4",
        "i2",
        "i0",
        "i3",
    ]


def test_the_item_index_takes_the_runs_priorities(db: Session):
    run = get_run("demo-pcf", session=db)
    index = item_index(run.dataset_id, session=db)
    assert list(index.columns) == ["item_id", "db_id", "position", "priority"]
    assert len(index) == 52
    assert index["priority"].isna().all()
    table = analyse_run(run, session=db).table
    ranked = with_priority(index, table)
    assert list(ranked["priority"]) == list(table["priority"])
    partial = with_priority(index, table.iloc[:10])
    assert partial["priority"].iloc[10:].isna().all()


def test_the_display_order_is_seeded_by_annotator_and_item(db: Session):
    items = load_items(1, session=db)
    ada = [display_order(item, "ada") for item in items]
    assert ada == [display_order(item, "ada") for item in items]
    assert all(
        sorted(order) == sorted(item.candidate_ids) for order, item in zip(ada, items, strict=True)
    )
    bob = [display_order(item, "bob") for item in items]
    assert sum(a != b for a, b in zip(ada, bob, strict=True)) > len(items) / 2
    gold_first = sum(order[0] == item.gold for order, item in zip(ada, items, strict=True))
    assert gold_first < len(items) / 2
    assert display_labels(("y", "x")) == {"y": "Candidate 1", "x": "Candidate 2"}


@pytest.mark.parametrize(
    ("share", "label"),
    [
        (0.0, "0 · guess"),
        (0.5, "0.5 · fairly sure"),
        (1.0, "1 · certain"),
        (0.6, "0.6"),
        (None, "—"),
    ],
)
def test_confidence_reads_as_its_share_with_words_on_the_scale(share, label):
    assert confidence_label(share) == label


def test_the_scale_is_a_share_in_zero_to_one():
    assert list(CONFIDENCE_SCALE) == [0.0, 0.25, 0.5, 0.75, 1.0]


def test_the_history_frame_names_choices_for_the_annotator(db: Session):
    item_id = item_db_ids(1, session=db)["demo-003"]
    item = demo_item(db, "demo-003")
    add_adjudication(item_id, session=db, annotator="ann", choice=item.candidate_ids[0])
    add_adjudication(
        item_id, session=db, annotator="ann", choice="none_correct", tags=["near-tie", "x"]
    )
    history = adjudication_history(item_id, session=db)
    labels = display_labels(tuple(reversed(item.candidate_ids)))
    frame = history_frame(history, labels)
    assert list(frame["choice"]) == [
        f"Candidate {len(item.candidates)} ({item.candidate_ids[0]})",
        "None is correct",
    ]
    assert list(frame["tags"]) == ["", "near-tie, x"]
    assert frame["corrects label"].iloc[1] == history[0].id
    assert history_frame([], labels).empty


@pytest.mark.parametrize(
    "text",
    ['=HYPERLINK("http://x.test","see")', "+1+2", "-2+3", "@SUM(A1)", "\tx", "\r=1"],
)
def test_the_csv_export_neutralises_formulas(text):
    record = dict.fromkeys(EXPORT_COLUMNS, "plain") | {"tags": [text, "ok"], "notes": text}
    record |= {"annotator": text, "confidence": -0.5, "id": 7}
    [row] = csv.DictReader(io.StringIO(adjudications_csv([record]), newline=""))
    assert row["notes"] == row["annotator"] == "'" + text
    assert row["tags"] == "'" + text + ";ok"
    assert (row["confidence"], row["id"], row["choice"]) == ("-0.5", "7", "plain")
