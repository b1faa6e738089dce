"""A stored run's results: decisions, flags, slot bias and accuracy (pcf/analysis/results.py)."""

from __future__ import annotations

from statistics import mean

import numpy as np
import pytest
from sqlmodel import Session

from pcf.analysis.results import (
    TABLE_COLUMNS,
    accuracy_against,
    analyse_run,
    decision_chunks,
    flag_counts,
    gold_answers,
    judgment_chunks,
    judgment_records,
    outcome_frame,
    run_decisions,
    run_summary,
    table_chunk,
    table_rows,
)
from pcf.analysis.stored import arrow_frame
from pcf.consensus import pack
from pcf.evaluation import compare_paired
from pcf.flags import FLAG_HELP, FLAGS
from pcf.instability import slot_bias
from pcf.store import (
    get_run,
    item_db_ids,
    load_items,
    run_judgments,
)
from tests.factories import decision_rows

DEMO_RUNS = ("demo-direct", "demo-pcf", "demo-repeated", "demo-strong-bias-pcf")


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


def test_flag_counts_and_outcomes():
    table = decision_rows([{"near_tie": True}, {"near_tie": True, "incomplete": True}, {}])
    counts = flag_counts(table)
    assert list(counts["flag"]) == list(FLAGS)
    assert dict(zip(counts["flag"], counts["items"], strict=True))["near_tie"] == 2
    assert list(counts["meaning"]) == [FLAG_HELP[f] for f in FLAGS]
    stats = {"improved": 3, "regressed": 1, "both_right": 5, "both_wrong": 2}
    assert list(outcome_frame(stats)["items"]) == [3, 1, 5, 2]


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
    table = decision_rows([{"winner": None, "direct_winner": "a"}, {"winner": "b"}, {}])
    stats = accuracy_against(table, {"i0": "a", "i1": "b"})
    assert (stats["n"], stats["direct_accuracy"], stats["method_accuracy"]) == (2, 0.5, 0.5)
    assert (stats["improved"], stats["regressed"], stats["method_abstentions"]) == (1, 1, 1)
    assert accuracy_against(table, {}) is None
    assert accuracy_against(table, {"nope": "a"}) is None


def test_the_table_of_no_records_has_the_columns():
    empty = arrow_frame(table_chunk(table_rows([], [])))
    assert (list(empty.columns), len(empty)) == (list(TABLE_COLUMNS), 0)


@pytest.mark.parametrize(("run_name", "calls"), [("demo-direct", 1), ("demo-pcf", 21)])
def test_the_summary_gives_calls_and_cost_per_item_beside_direct(db: Session, run_name, calls):
    summary = run_summary(get_run(run_name, session=db), session=db)
    assert summary["per_item"] == {
        "calls": calls,
        "direct_calls": 1.0,
        "cost_usd": 0.0,  # the simulated judge is free
        "direct_cost_usd": 0.0,
    }


def test_the_strong_bias_demo_run_shows_the_consensus_recovering_from_slot_one(db):
    run = get_run("demo-strong-bias-pcf", session=db)
    assert (run.backend, run.model) == ("simulated", "sim-strong-primacy")
    accuracy = run_summary(run, session=db)["accuracy"]
    assert accuracy["method_accuracy"] > accuracy["direct_accuracy"] + 0.1
    assert accuracy["improved"] > accuracy["regressed"]


# ---------------------------------------------------------------- a chunk of items at a time


def joined(chunks) -> list:
    """The records of every chunk, in order."""
    return [record for chunk in chunks for record in chunk]


def without_gold(records: list) -> list:
    """Decision records without the ``gold`` and ``correct`` that chunks add for exports."""
    return [strip_gold(record) for record in records]


def strip_gold(record: dict) -> dict:
    assert {"gold", "correct"} <= record.keys()
    return {k: v for k, v in record.items() if k not in ("gold", "correct")}


@pytest.mark.parametrize("run_name", DEMO_RUNS)
def test_a_demo_run_read_in_chunks_gives_the_whole_runs_records(db: Session, run_name: str):
    run = get_run(run_name, session=db)
    decisions = run_decisions(run, session=db)
    assert without_gold(joined(decision_chunks(run, session=db, size=3))) == decisions
    assert joined(judgment_chunks(run, session=db, size=3)) == judgment_records(run, session=db)
    assert len(decisions) == 52


def test_runs_of_every_shape_read_in_chunks_give_the_whole_runs_records(mixed_runs, session):
    shapes = set()
    for name in mixed_runs:
        run = get_run(name, session=session)
        decisions = run_decisions(run, session=session)
        judgments = judgment_records(run, session=session)
        for size in (1, 3, 7):
            assert (
                without_gold(joined(decision_chunks(run, session=session, size=size))) == decisions
            ), name
            assert joined(judgment_chunks(run, session=session, size=size)) == judgments, name
        metrics = [d["metrics"] for d in decisions]
        shapes |= {("calls", m["n_calls"]) for m in metrics}
        shapes |= {("candidates", len(d["consensus"])) for d in decisions}
        shapes |= {("executions", j["execution"]) for j in judgments}
        shapes |= {("failed", not j["ok"]) for j in judgments}
        shapes |= {("reason", m["reason"]) for m in metrics if "reason" in m}
    # What makes chunks worth testing: items of 2 to 5 candidates (one group each), 2 to 8
    # calls an item, two executions, failed calls, and APOCJudge's confirmations.
    assert {("candidates", n) for n in (2, 3, 4, 5)} <= shapes
    assert {("calls", n) for n in (2, 3, 5, 6, 7, 8)} <= shapes
    assert {("executions", 1), ("failed", True)} <= shapes
    assert sum(kind == "reason" for kind, _ in shapes) > 1


def test_the_summary_read_in_chunks_counts_every_item_of_the_whole_run(mixed_runs, session):
    for name in mixed_runs:
        run = get_run(name, session=session)
        decisions = run_decisions(run, session=session)
        gold = {item.item_id: item.gold for item in load_items(run.dataset_id, session=session)}
        labelled = [d for d in decisions if gold[d["item_id"]] is not None]
        summary = run_summary(run, session=session, size=100)
        assert summary["items"] == len(decisions)
        assert summary["flagged"] == {f: sum(f in d["flags"] for d in decisions) for f in FLAGS}
        assert summary["per_item"]["calls"] == mean(d["metrics"]["n_calls"] for d in decisions)
        accuracy = summary["accuracy"]
        assert accuracy["n"] == len(labelled) > 0
        right = sum(d["winner"] == gold[d["item_id"]] for d in labelled)
        assert accuracy["method_accuracy"] == right / len(labelled)
        for size in (1, 7):
            assert run_summary(run, session=session, size=size) == summary, (name, size)
