"""The weight playground and the weight table, against the decisions of `aggregate`."""

from __future__ import annotations

import pandas as pd
import pytest

from pcf.analysis.weight_playground import (
    PackedRun,
    archived_packed_run,
    evaluate_weights,
    pack_run,
    preset_records,
    run_diagnostics,
    stored_packed_run,
)
from pcf.consensus import pack
from pcf.decisions import aggregate
from pcf.reports.tables import weight_table
from pcf.store import get_dataset, get_run, load_items, run_judgments
from pcf.weights import PRESETS, Weights
from tests.factories import judgment, make_item, stored_run


@pytest.fixture
def demo(db):
    """Packed demo runs plus what `aggregate` needs to recompute them independently."""
    runs = {n: get_run(n, session=db) for n in ("demo-direct", "demo-pcf", "demo-repeated")}
    items = load_items(runs["demo-pcf"].dataset_id, session=db)
    return {
        "packed": {n: pack_run(r, session=db) for n, r in runs.items()},
        "judgments": {n: run_judgments(r.id, session=db) for n, r in runs.items()},
        "items": items,
    }


def weight_records(runs: list[PackedRun]) -> pd.DataFrame:
    """The weight table in long form: each run's preset rows, as the report collects them."""
    return pd.concat([preset_records(packed) for packed in runs], ignore_index=True)


def execution_zero(demo, run: str) -> list:
    """The run's judgments of execution 0: what the matched diagnostics use."""
    return [j for j in demo["judgments"][run] if j.execution == 0]


def recomputed(demo, run: str, weights: Weights, k: int | None = None) -> tuple[float, float]:
    """(consensus accuracy, direct accuracy) from `aggregate`'s records of execution 0."""
    records = aggregate(execution_zero(demo, run), items=demo["items"], weights=weights, k=k)
    gold = {i.item_id: i.gold for i in demo["items"]}
    method = sum(r["winner"] == gold[r["item_id"]] for r in records) / len(records)
    direct = sum(r["metrics"]["direct_winner"] == gold[r["item_id"]] for r in records)
    return method, direct / len(records)


@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("k", [None, 1, 3, 5])
def test_playground_accuracy_equals_aggregate(demo, preset, k):
    outcome = evaluate_weights(demo["packed"]["demo-pcf"], PRESETS[preset], k=k)
    method, direct = recomputed(demo, "demo-pcf", PRESETS[preset], k)
    assert outcome.n == 52
    assert outcome.accuracy == pytest.approx(method)
    assert outcome.direct_accuracy == pytest.approx(direct)
    assert outcome.improved - outcome.regressed == round(52 * (method - direct))


def test_changed_items_are_those_whose_winner_left_direct(demo):
    outcome = evaluate_weights(demo["packed"]["demo-pcf"], PRESETS["proposed"])
    records = aggregate(execution_zero(demo, "demo-pcf"), items=demo["items"])
    changed = [r["item_id"] for r in records if r["winner"] != r["metrics"]["direct_winner"]]
    assert outcome.changed["item_id"].tolist() == changed
    counts = outcome.changed["outcome"].value_counts().to_dict()
    assert counts.get("improved", 0) == outcome.improved
    assert counts.get("regressed", 0) == outcome.regressed


def test_weight_table_has_a_row_per_preset_and_two_columns_per_run(demo):
    packed = [demo["packed"][n] for n in ("demo-direct", "demo-pcf")]
    table = weight_table(weight_records(packed))
    assert table.index.tolist() == list(PRESETS)
    assert table.loc["score-only", ["ws", "wB", "wv", "wu"]].tolist() == [1, 0, 0, 0]
    for preset, weights in PRESETS.items():
        method, direct = recomputed(demo, "demo-pcf", weights)
        assert table.loc[preset, "demo-pcf accuracy %"] == pytest.approx(100 * method)
        assert table.loc[preset, "demo-pcf Δ vs direct"] == pytest.approx(100 * (method - direct))
    # The direct run has one call per item: every preset is its own direct baseline.
    assert (table["demo-direct Δ vs direct"] == 0).all()


def test_diagnostics_use_execution_zero_only(demo):
    """demo-pcf has several executions; pooling them gives other winners than execution 0."""
    assert {j.execution for j in demo["judgments"]["demo-pcf"]} != {0}
    pooled = aggregate(demo["judgments"]["demo-pcf"], items=demo["items"])
    alone = aggregate(execution_zero(demo, "demo-pcf"), items=demo["items"])
    assert [r["winner"] for r in pooled] != [r["winner"] for r in alone]
    outcome = evaluate_weights(demo["packed"]["demo-pcf"], PRESETS["proposed"])
    gold = {i.item_id: i.gold for i in demo["items"]}
    assert outcome.accuracy == sum(r["winner"] == gold[r["item_id"]] for r in alone) / 52


def test_weight_records_are_the_weight_table_in_long_form(demo):
    packed = [demo["packed"][n] for n in ("demo-pcf", "demo-repeated")]
    records = weight_records(packed)
    table = weight_table(records)
    assert len(records) == 2 * len(PRESETS)
    for row in records.to_dict("records"):
        method, direct = recomputed(demo, row["run"], PRESETS[row["preset"]])
        assert row["N"] == 52
        assert row["direct %"] == 100 * direct
        assert row["accuracy %"] == 100 * method
        assert table.loc[row["preset"], f"{row['run']} accuracy %"] == row["accuracy %"]


def test_packed_run_knows_its_k_and_that_it_is_simulated(demo):
    packed = demo["packed"]["demo-pcf"]
    assert packed.k == 7
    assert packed.simulated
    assert demo["packed"]["demo-direct"].k == 1


def test_apoc_runs_have_no_weights(db):
    dataset = get_dataset("demo", session=db)
    run = stored_run(db, dataset.id, name="pairs", protocol="apoc", schedule="apoc")
    with pytest.raises(ValueError, match="APOCJudge"):
        pack_run(run, session=db)


def hand_packed(gold: str | None) -> PackedRun:
    """One item, three calls: scores favour c1, every ranking and vote favours c0."""
    item = make_item("i1", n=2, gold=gold)
    calls = [
        judgment("i1", k, ("c0", "c1"), {"c0": 5, "c1": 9}, ranking=("c0", "c1")) for k in range(3)
    ]
    groups = tuple(pack(calls, {"i1": item.candidate_ids}))
    return PackedRun("hand", groups, ("i1",), {"i1": gold}, 3, simulated=False)


def test_weights_decide_a_hand_made_item():
    packed = hand_packed("c1")
    assert evaluate_weights(packed, PRESETS["score-only"]).accuracy == 1.0
    vote = evaluate_weights(packed, PRESETS["vote-only"])
    assert vote.accuracy == 0.0
    assert vote.changed.empty


def test_no_gold_no_accuracy():
    with pytest.raises(ValueError, match="no judged item with a gold id"):
        evaluate_weights(hand_packed(None), PRESETS["proposed"])


@pytest.mark.parametrize("name", ["demo-pcf", "demo-direct"])
def test_a_run_packed_in_chunks_and_stored_decides_as_it_packed_whole(db, new_session, name):
    run = get_run(name, session=db)
    whole = pack_run(run, session=db, chunk=10**9)
    chunked = pack_run(run, session=db, chunk=5)
    stored = stored_packed_run(run, session=db)  # computed and stored
    db.commit()
    with new_session() as s:
        read = stored_packed_run(get_run(name, session=s), session=s)
        archived = archived_packed_run(get_run(name, session=s), session=s)  # read at each pass
    assert len(chunked.groups) == 11
    for packed in (chunked, stored, read, archived):
        assert (packed.item_order, packed.gold, packed.k) == (
            whole.item_order,
            whole.gold,
            whole.k,
        )
        for k in range(1, whole.k + 1):
            for weights in PRESETS.values():
                found, expected = (evaluate_weights(p, weights, k=k) for p in (packed, whole))
                assert (found.n, found.accuracy, found.direct_accuracy) == (
                    expected.n,
                    expected.accuracy,
                    expected.direct_accuracy,
                )
                pd.testing.assert_frame_equal(found.changed, expected.changed)
    diagnostics = run_diagnostics(get_run(name, session=db), session=db)
    pd.testing.assert_frame_equal(diagnostics.presets, weight_records([whole]))
