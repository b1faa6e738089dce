"""Data preparation of the Overview, Review and Adjudicate pages (pcf/review.py)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import Engine
from sqlmodel import Session

from pcf.analysis.adjudications import (
    adjudication_queue,
    choice_label,
    confidence_value,
    display_labels,
    display_order,
    history_frame,
    item_index,
    with_priority,
)
from pcf.analysis.item_detail import (
    calls_frame,
    candidate_labels,
    consensus_frame,
    describe_candidate,
    escape_markdown,
    format_number,
    item_decision,
    ordering_frame,
    ordering_label,
)
from pcf.analysis.item_list import ADJUDICATED_FILTERS, filter_items, list_view, neighbours
from pcf.analysis.results import (
    TABLE_COLUMNS,
    accuracy_against,
    analyse_run,
    decision_table,
    flag_counts,
    gold_answers,
    outcome_frame,
    run_decisions,
)
from pcf.consensus import pack
from pcf.evaluation import compare_paired
from pcf.flags import FLAG_HELP, FLAGS
from pcf.instability import slot_bias
from pcf.items import Candidate, Item
from pcf.store import (
    Call,
    add_adjudication,
    adjudication_history,
    get_engine,
    get_run,
    insert_calls,
    item_calls,
    item_db_ids,
    labelled_item_counts,
    load_item,
    load_items,
    matching_item_keys,
    run_judgments,
    run_version,
    session_scope,
)
from tests.demo_database import copy_demo


@pytest.fixture
def engine(isolated_database: str) -> Engine:
    copy_demo(isolated_database)
    return get_engine(isolated_database)


@pytest.fixture
def db(engine: Engine) -> Iterator[Session]:
    with Session(engine) as session:
        yield session


def demo_item(db: Session, key: str) -> Item:
    return next(i for i in load_items(1, session=db) if i.item_id == key)


def make_call(execution: int, call_index: int, order, ranking=None, *, ok=True) -> Call:
    """An unsaved listwise call: factuality 10, 9, ... down the ranking."""
    ranking = ranking or order
    judgment = (
        {
            "factuality": {cid: 10.0 - i for i, cid in enumerate(ranking)},
            "hallucination_risk": dict.fromkeys(order, 0.2),
            "ranking": list(ranking),
            "confidence": 0.9,
        }
        if ok
        else None
    )
    return Call(
        run_id=1,
        item_id=1,
        execution=execution,
        call_index=call_index,
        order=list(order),
        keys=["A", "B", "C"][: len(order)],
        content_key=f"{execution}-{call_index}",
        ok=ok,
        error=None if ok else "no_json",
        judgment=judgment,
    )


ITEM = Item("i1", "Q?", (Candidate("x", "X."), Candidate("y", "Y."), Candidate("z", "Z.")), "y")


def table_of(rows: list[dict]) -> pd.DataFrame:
    """A decisions table from a few partial rows (missing flags False)."""
    full = [
        {
            "item_id": f"i{i}",
            "db_id": i,
            "position": i,
            "bucket": None,
            "gold": None,
            "winner": "a",
            "direct_winner": "a",
            "priority": 0.0,
            "flags": "",
            **dict.fromkeys(FLAGS, False),
            **row,
        }
        for i, row in enumerate(rows)
    ]
    return pd.DataFrame(full)


# ---------------------------------------------------------------- run level


@pytest.mark.parametrize("run_name", ["demo-pcf", "demo-direct", "demo-repeated"])
def test_the_table_holds_the_runs_decisions(db: Session, run_name: str):
    run = get_run(run_name, session=db)
    table = analyse_run(run, session=db).table
    records = run_decisions(run, session=db)
    assert list(table.columns) == list(TABLE_COLUMNS)
    assert list(table["item_id"]) == [r["item_id"] for r in records]
    assert list(table["winner"]) == [r["winner"] for r in records]
    assert list(table["direct_winner"]) == [r["metrics"]["direct_winner"] for r in records]
    assert list(table["priority"]) == [r["metrics"]["priority"] for r in records]
    assert list(table["flags"]) == [", ".join(r["flags"]) for r in records]
    for flag in FLAGS:
        assert list(table[flag]) == [flag in r["flags"] for r in records]
    ids = item_db_ids(run.dataset_id, session=db)
    assert list(table["db_id"]) == [ids[key] for key in table["item_id"]]


def test_slot_bias_is_over_every_call_of_the_run(db: Session):
    run = get_run("demo-pcf", session=db)
    analysis = analyse_run(run, session=db)
    items = {i.item_id: i for i in load_items(run.dataset_id, session=db)}
    (group,) = pack(
        run_judgments(run.id, session=db), {k: i.candidate_ids for k, i in items.items()}
    )
    expected = slot_bias(group, [items[k].gold for k in group.item_ids])
    assert list(analysis.slot_bias["slot"]) == [1, 2, 3, 4]
    assert np.allclose(analysis.slot_bias["top_share"], expected.top_share)
    assert list(analysis.slot_bias["top_count"]) == list(expected.top_counts)
    assert np.allclose(analysis.slot_bias["gold_recall"], expected.gold_recall)
    (test,) = analysis.slot_tests.itertuples()
    assert (test.n, test.calls) == (4, 52 * 21)
    assert (test.chi2, test.p_value) == (expected.chi2, expected.p_value)


def test_the_run_version_changes_with_its_calls(engine: Engine, db: Session):
    run = get_run("demo-direct", session=db)
    before = run_version(run, session=db)
    assert before[:2] == ("finished", 52)
    assert run_version(run, session=db) == before
    with session_scope(engine) as s:
        item_id = item_db_ids(run.dataset_id, session=s)["demo-001"]
        insert_calls(
            [
                {
                    "run_id": run.id,
                    "item_id": item_id,
                    "call_index": 1,
                    "order": [],
                    "keys": [],
                    "request": {},
                    "repaired": [],
                    "content_key": "extra",
                    "ok": False,
                }
            ],
            session=s,
        )
    assert run_version(run, session=db) != before


def test_flag_counts_and_outcomes():
    table = table_of([{"near_tie": True}, {"near_tie": True, "incomplete": True}, {}])
    counts = flag_counts(table)
    assert list(counts["flag"]) == list(FLAGS)
    assert dict(zip(counts["flag"], counts["items"], strict=True))["near_tie"] == 2
    assert list(counts["meaning"]) == [FLAG_HELP[f] for f in FLAGS]
    stats = {"improved": 3, "regressed": 1, "both_right": 5, "both_wrong": 2}
    assert list(outcome_frame(stats)["items"]) == [3, 1, 5, 2]


# ---------------------------------------------------------------- accuracy


def test_accuracy_against_gold_is_the_paired_comparison(db: Session):
    run = get_run("demo-pcf", session=db)
    table = analyse_run(run, session=db).table
    records = run_decisions(run, session=db)
    gold = {i.item_id: i.gold for i in load_items(run.dataset_id, session=db)}
    assert gold_answers(table) == gold
    assert accuracy_against(table, gold) == compare_paired(
        [gold[r["item_id"]] for r in records],
        [r["metrics"]["direct_winner"] for r in records],
        [r["winner"] for r in records],
    )


def test_accuracy_uses_only_items_with_an_answer_and_counts_abstentions_wrong():
    table = table_of([{"winner": None, "direct_winner": "a"}, {"winner": "b"}, {}])
    stats = accuracy_against(table, {"i0": "a", "i1": "b"})
    assert (stats["n"], stats["direct_accuracy"], stats["method_accuracy"]) == (2, 0.5, 0.5)
    assert (stats["improved"], stats["regressed"], stats["method_abstentions"]) == (1, 1, 1)
    assert accuracy_against(table, {}) is None
    assert accuracy_against(table, {"nope": "a"}) is None


# ---------------------------------------------------------------- the item list


def test_filters_combine_and_sort_most_doubtful_first():
    table = table_of(
        [
            {"priority": 0.5, "near_tie": True, "bucket": "b1"},
            {"priority": 1.5, "overrides_direct": True, "bucket": "b2"},
            {"priority": 1.5, "incomplete": True, "bucket": "b1"},
            {"priority": math.nan, "bucket": "b2"},
            {"priority": 0.1},
        ]
    )
    assert list(filter_items(table)["item_id"]) == ["i1", "i2", "i0", "i4", "i3"]
    assert list(filter_items(table, flags=["near_tie", "incomplete"])["item_id"]) == ["i2", "i0"]
    assert list(filter_items(table, overrides_only=True)["item_id"]) == ["i1"]
    assert list(filter_items(table, buckets=["b2"])["item_id"]) == ["i1", "i3"]
    labelled = {"i0", "i4"}
    assert list(filter_items(table, adjudicated="adjudicated", labelled=labelled)["item_id"]) == [
        "i0",
        "i4",
    ]
    rest = filter_items(table, adjudicated="not adjudicated", labelled=labelled)
    assert list(rest["item_id"]) == ["i1", "i2", "i3"]
    assert list(filter_items(table, matching={"i3", "i0"})["item_id"]) == ["i0", "i3"]
    assert filter_items(table, matching=set()).empty
    assert list(filter_items(table, flags=["near_tie"], buckets=["b2"])["item_id"]) == []
    assert "all" in ADJUDICATED_FILTERS
    with pytest.raises(ValueError, match="adjudicated must be one of"):
        filter_items(table, adjudicated="maybe")


def test_list_view_counts_labels():
    view = list_view(table_of([{"priority": 0.12345}, {}]), {"i1": 2})
    assert list(view.columns) == [
        "item",
        "priority",
        "flags",
        "PCF winner",
        "direct winner",
        "gold",
        "bucket",
        "labels",
    ]
    assert list(view["labels"]) == [0, 2]
    assert view["priority"][0] == 0.123


@pytest.mark.parametrize(
    ("current", "expected"),
    [
        ("a", (None, "b")),
        ("b", ("a", "c")),
        ("c", ("b", None)),
        ("zz", (None, "a")),
        (None, (None, "a")),
    ],
)
def test_neighbours(current, expected):
    assert neighbours(["a", "b", "c"], current) == expected


def test_neighbours_of_an_empty_list():
    assert neighbours([], "a") == (None, None)


def test_search_matches_ids_prompts_and_candidates_in_any_case(db: Session):
    assert matching_item_keys(1, "EVEREST", session=db) == {"demo-025", "demo-052"}
    assert matching_item_keys(1, "<script>", session=db) == {"demo-052"}
    assert matching_item_keys(1, "DEMO-01", session=db) == {f"demo-01{i}" for i in range(10)}
    for literal in ("%", "_", "% of"):
        assert matching_item_keys(1, literal, session=db) == {
            i.item_id
            for i in load_items(1, session=db)
            if literal in i.prompt or any(literal in c.text for c in i.candidates)
        }


def test_labelled_items_count_their_annotators(engine: Engine, db: Session):
    ids = item_db_ids(1, session=db)
    with session_scope(engine) as s:
        for who, choice in (
            ("ann", "cannot_tell"),
            ("ann", "none_correct"),
            ("bob", "cannot_tell"),
        ):
            add_adjudication(ids["demo-002"], session=s, annotator=who, choice=choice)
        add_adjudication(ids["demo-009"], session=s, annotator="bob", choice="cannot_tell")
    assert labelled_item_counts(1, session=db) == {"demo-002": 2, "demo-009": 1}


# ---------------------------------------------------------------- one item


def test_load_item_reads_one_item(db: Session):
    ids = item_db_ids(1, session=db)
    expected = demo_item(db, "demo-052")
    item = load_item(ids["demo-052"], session=db)
    assert item == expected
    assert item.metadata["db_id"] == ids["demo-052"]
    assert load_item(10**6, session=db) is None


def test_item_calls_are_the_items_calls_in_order(db: Session):
    run = get_run("demo-pcf", session=db)
    item_id = item_db_ids(run.dataset_id, session=db)["demo-010"]
    calls = item_calls(run.id, item_id, session=db)
    assert [(c.execution, c.call_index) for c in calls] == [
        (e, k) for e in range(3) for k in range(7)
    ]
    assert {c.item_id for c in calls} == {item_id}


def test_the_item_decision_equals_the_runs(db: Session):
    run = get_run("demo-pcf", session=db)
    ids = item_db_ids(run.dataset_id, session=db)
    records = {r["item_id"]: r for r in run_decisions(run, session=db)}
    for key in ("demo-001", "demo-024", "demo-052"):
        item = demo_item(db, key)
        assert item_decision(item, item_calls(run.id, ids[key], session=db)) == records[key]
    assert item_decision(demo_item(db, "demo-001"), []) is None


def test_the_heatmap_frame_has_a_row_per_call_and_candidate():
    calls = [
        make_call(0, 0, ["x", "y", "z"], ["y", "x", "z"]),
        make_call(0, 1, ["z", "x", "y"], ok=False),
        make_call(1, 0, ["y", "z", "x"], ["x", "z", "y"]),
    ]
    frame = ordering_frame(ITEM, calls)
    assert len(frame) == 9
    assert list(frame["ordering"].unique()) == ["e0·c0  A B C", "e0·c1  C A B", "e1·c0  B C A"]
    first = frame[frame["call_index"].eq(0) & frame["execution"].eq(0)]
    assert list(first["candidate"]) == ["A", "B", "C"]
    assert list(first["rank"]) == [2, 1, 3]
    assert list(first["factuality"]) == [9, 10, 8]
    assert list(first["slot"]) == [1, 2, 3]
    failed = frame[frame["call_index"].eq(1)]
    assert failed["rank"].isna().all()
    assert failed["factuality"].isna().all()
    assert list(failed["slot"]) == [2, 3, 1]
    assert not failed["ok"].any()


def test_labels_and_the_ordering_label():
    assert candidate_labels(ITEM) == {"x": "A", "y": "B", "z": "C"}
    many = Item("m", "Q", tuple(Candidate(f"c{i}", "t") for i in range(27)))
    assert candidate_labels(many)["c26"] == "#27"
    call = make_call(2, 5, ["z", "y", "x"])
    assert ordering_label(call, candidate_labels(ITEM)) == "e2·c5  C B A"


def test_the_calls_frame_names_the_top_pick():
    calls = [
        make_call(0, 0, ["x", "y", "z"], ["z", "x", "y"]),
        make_call(0, 1, ["y", "x", "z"], ok=False),
    ]
    frame = calls_frame(ITEM, calls)
    assert frame["top pick"][0] == "C"
    assert pd.isna(frame["top pick"][1])
    assert list(frame["ok"]) == [True, False]
    assert pd.isna(frame["error"][0])
    assert frame["error"][1] == "no_json"
    pairwise = make_call(0, 0, ["x", "y"])
    pairwise.judgment = {"verdict": "y", "confidence": 0.7}
    assert calls_frame(ITEM, [pairwise])["top pick"].tolist() == ["B"]


def test_the_consensus_frame_has_components_and_roles(db: Session):
    run = get_run("demo-pcf", session=db)
    item = demo_item(db, "demo-024")
    record = item_decision(item, item_calls(run.id, item.metadata["db_id"], session=db))
    frame = consensus_frame(item, record)
    assert list(frame["id"]) == list(item.candidate_ids)
    assert dict(zip(frame["id"], frame["C"], strict=True)) == record["consensus"]
    for part in "SBVU":
        assert (
            dict(zip(frame["id"], frame[part], strict=True))
            == record["metrics"]["components"][part]
        )
    roles = dict(zip(frame["id"], frame["role"], strict=True))
    assert "PCF winner" in roles[record["winner"]]
    assert "direct winner" in roles[record["metrics"]["direct_winner"]]
    assert "gold" in roles[item.gold]
    assert consensus_frame(item, None).empty


def test_describing_candidates():
    labels = candidate_labels(ITEM)
    assert describe_candidate("y", labels) == "B (y)"
    assert describe_candidate(None, labels) == "—"
    assert describe_candidate(math.nan, labels) == "—"
    assert describe_candidate("none_correct", labels) == "None is correct"
    assert choice_label("cannot_tell", labels) == "Cannot tell"


def test_numbers_are_formatted_unless_unknown():
    assert format_number(0.4567, ".0%") == "46%"
    assert format_number(math.nan, ".2f") == "—"


def test_escaped_markdown_keeps_the_text_and_disarms_markup():
    text = "![x](http://e.invalid/x.png) <script>alert(1)</script> **b** `c` [l](javascript:x)"
    escaped = escape_markdown(text)
    assert escaped.replace("\\", "") == text.replace("\\", "")
    assert re.search(r"(?<!\\)[!\[\]()<>*`]", escaped) is None


# ---------------------------------------------------------------- adjudication


def test_the_queue_is_most_doubtful_first_without_done_and_skipped_last():
    items = table_of(
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


@pytest.mark.parametrize(("level", "share"), [(1, 0.0), (2, 0.25), (3, 0.5), (4, 0.75), (5, 1.0)])
def test_confidence_levels_map_onto_zero_to_one(level, share):
    assert confidence_value(level) == share


def test_an_unknown_confidence_level_is_refused():
    with pytest.raises(ValueError, match="1 to 5"):
        confidence_value(6)


def test_the_history_frame_names_choices_for_the_annotator(engine: Engine, db: Session):
    item_id = item_db_ids(1, session=db)["demo-003"]
    item = demo_item(db, "demo-003")
    with session_scope(engine) as s:
        add_adjudication(item_id, session=s, annotator="ann", choice=item.candidate_ids[0])
        add_adjudication(
            item_id, session=s, annotator="ann", choice="none_correct", tags=["near-tie", "x"]
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


def test_the_table_of_no_records_has_the_columns():
    assert list(decision_table([], []).columns) == list(TABLE_COLUMNS)
