"""Queries the pages use: run versions, search, labelled counts, one item and its calls."""

from __future__ import annotations

from sqlmodel import Session

from pcf.store import (
    add_adjudication,
    add_resolution,
    get_run,
    insert_calls,
    item_calls,
    item_db_ids,
    label_revision,
    labelled_item_counts,
    load_item,
    load_items,
    matching_item_keys,
    replace_calls,
    run_calls,
    run_version,
)
from tests.factories import call_row, demo_item


def test_the_run_version_changes_with_its_calls(db: Session):
    run = get_run("demo-direct", session=db)
    before = run_version(run, session=db)
    assert before[:2] == ("finished", 52)
    assert run_version(run, session=db) == before
    item_id = item_db_ids(run.dataset_id, session=db)["demo-001"]
    insert_calls([call_row(run.id, item_id, 1, ok=False, judgment=None)], session=db)
    assert run_version(run, session=db) != before


def test_the_run_version_changes_when_a_failed_call_gets_a_new_answer(db: Session):
    """A retry replaces the failed answer in place: same call count, same newest id."""
    run = get_run("demo-direct", session=db)
    before = run_version(run, session=db)
    (call, *_) = run_calls(run.id, session=db)
    replace_calls({call.id: {"ok": False, "error": "retried: again"}}, session=db)
    after = run_version(run, session=db)
    assert after[:3] == before[:3]
    assert after != before


def test_the_label_revision_changes_with_a_correction_and_a_resolution(db: Session):
    """Corrections keep the number of labelled items: the revision still moves."""
    item_id = item_db_ids(1, session=db)["demo-001"]
    seen = [label_revision(1, session=db)]
    add_adjudication(item_id, session=db, annotator="ann", choice="none_correct")
    seen.append(label_revision(1, session=db))
    add_adjudication(item_id, session=db, annotator="ann", choice="cannot_tell")
    seen.append(label_revision(1, session=db))
    add_resolution(item_id, session=db, choice="none_correct", reason="", resolved_by="r")
    seen.append(label_revision(1, session=db))
    assert len(set(seen)) == 4


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


def test_labelled_items_count_their_annotators(db: Session):
    ids = item_db_ids(1, session=db)
    for who, choice in (
        ("ann", "cannot_tell"),
        ("ann", "none_correct"),
        ("bob", "cannot_tell"),
    ):
        add_adjudication(ids["demo-002"], session=db, annotator=who, choice=choice)
    add_adjudication(ids["demo-009"], session=db, annotator="bob", choice="cannot_tell")
    assert labelled_item_counts(1, session=db) == {"demo-002": 2, "demo-009": 1}


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
