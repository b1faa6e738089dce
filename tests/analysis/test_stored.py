"""Results kept per revision (pcf/analysis/stored.py): a run decided a chunk of items at a time
and stored equals it decided whole, on every kind of run; a stored result is read while the
run's calls stay the same and computed again as soon as they change."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sqlmodel import Session, col, select

from pcf.access import operator
from pcf.analysis.against_labels import run_calibration
from pcf.analysis.results import RunAnalysis, analyse_run, stored_analysis
from pcf.analysis.stored import decode, encode, kept
from pcf.labelling.labels import save_label
from pcf.store import (
    Call,
    RunResult,
    delete_run,
    get_run,
    insert_calls,
    item_db_ids,
    list_runs,
    replace_calls,
    result_revision,
)
from tests.factories import pcf

WHOLE = 10**9  # a chunk larger than any dataset: the run decided at once


def mixed_items() -> list[dict]:
    """Items of 2 to 5 candidates, some without gold; pairs for an APOCJudge run."""
    items = []
    for i in range(14):
        n = 2 + i % 4
        items.append(
            {
                "item_id": f"mixed-{i:02d}",
                "prompt": f"About how many moons does planet {i} have?",
                "candidates": [
                    {"id": f"a{c}", "text": f"Planet {i} has {c * i + 1} moons."} for c in range(n)
                ],
                "gold": None if i % 5 == 3 else f"a{i % n}",
                "bucket": ("near", "far")[i % 2],
            }
        )
    return items


@pytest.fixture
def runs(db: Session, tmp_path: Path) -> Session:
    """The demo's runs; a dataset of mixed candidate counts judged by PCF (with some calls
    failed) and its two-candidate items by APOCJudge."""
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("".join(json.dumps(item) + "\n" for item in mixed_items()))
    pairs = tmp_path / "pairs.jsonl"
    two = [item for item in mixed_items() if len(item["candidates"]) == 2]
    pairs.write_text("".join(json.dumps(item) + "\n" for item in two))
    pcf("import", "jsonl", str(mixed), "--name", "mixed")
    pcf("import", "jsonl", str(pairs), "--name", "pairs")
    pcf("judge", "mixed", "--protocol", "pcf", "--k", "3", "--name", "mixed-pcf")
    pcf("judge", "mixed", "--protocol", "direct", "--name", "mixed-direct")
    pcf("judge", "pairs", "--protocol", "apoc", "--name", "pairs-apoc")
    run = get_run("mixed-pcf", session=db)
    calls = db.exec(select(Call).where(Call.run_id == run.id).order_by(col(Call.id))).all()
    failed = {"ok": False, "error": "no_json", "judgment": None}
    replace_calls({c.id: failed for c in calls[::4]}, session=db)
    db.commit()
    return db


def assert_same(found: RunAnalysis, expected: RunAnalysis) -> None:
    for part in ("table", "slot_bias", "slot_tests"):
        pd.testing.assert_frame_equal(getattr(found, part), getattr(expected, part))


def test_every_kind_of_run_decided_in_chunks_and_stored_equals_it_decided_whole(
    runs: Session, new_session
):
    names = [r.name for r in list_runs(session=runs)]
    assert {"demo-pcf", "demo-direct", "mixed-pcf", "pairs-apoc"} <= set(names)
    for name in names:
        run = get_run(name, session=runs)
        whole = analyse_run(run, session=runs, chunk=WHOLE)
        assert_same(analyse_run(run, session=runs, chunk=3), whole)
        assert_same(stored_analysis(run, session=runs), whole)  # computed and stored
        runs.commit()
        with new_session() as s:
            assert_same(stored_analysis(get_run(name, session=s), session=s), whole)  # read
    mixed = analyse_run(get_run("mixed-pcf", session=runs), session=runs)
    assert sorted(mixed.slot_tests["n"]) == [2, 3, 4, 5]
    assert mixed.table["incomplete"].any()
    assert mixed.table["gold"].isna().any()


def stored_rows(session: Session, name: str | None = None) -> list[tuple[int, str, str]]:
    """Every stored result (``name``'s alone when given): run id, name, revision."""
    query = select(RunResult.run_id, RunResult.name, RunResult.revision)
    rows = session.exec(query.order_by(col(RunResult.run_id))).all()
    return [(run_id, kind, revision) for run_id, kind, revision in rows if name in (None, kind)]


def test_a_stored_analysis_is_read_until_the_calls_change(runs: Session):
    run = get_run("mixed-pcf", session=runs)
    first = stored_analysis(run, session=runs)
    revision = result_revision(run, session=runs)
    runs.commit()
    assert (run.id, "analysis", revision) in stored_rows(runs, "analysis")

    # A failed call asked again: same call count and newest id, a replaced answer more.
    failed = runs.exec(select(Call).where(Call.run_id == run.id, ~col(Call.ok))).first()
    key = runs.exec(
        select(Call.judgment).where(
            Call.run_id == run.id, col(Call.ok), Call.item_id == failed.item_id
        )
    ).first()
    replace_calls({failed.id: {"ok": True, "error": None, "judgment": key}}, session=runs)
    runs.commit()
    retried = stored_analysis(get_run("mixed-pcf", session=runs), session=runs)
    after_retry = result_revision(run, session=runs)
    fresh = analyse_run(get_run("mixed-pcf", session=runs), session=runs)
    runs.commit()
    assert after_retry != revision
    assert_same(retried, fresh)
    row = retried.table.set_index("item_id").loc[first.table.iloc[0]["item_id"]]
    assert (run.id, "analysis", after_retry) in stored_rows(runs, "analysis")
    assert int(row["n_calls"]) > 0

    # A call added to an item: the item's decision counts it at once.
    item = runs.exec(select(Call).where(Call.run_id == run.id, col(Call.ok))).first()
    values = item.model_dump(exclude={"id", "created_at"})
    insert_calls([{**values, "execution": 1}], session=runs)
    runs.commit()
    added = stored_analysis(get_run("mixed-pcf", session=runs), session=runs)
    key = next(k for k, v in item_db_ids(run.dataset_id, session=runs).items() if v == item.item_id)
    before = retried.table.set_index("item_id").loc[key, "n_calls"]
    assert added.table.set_index("item_id").loc[key, "n_calls"] == before + 1


def test_deleting_a_run_deletes_its_stored_results(runs: Session):
    run = get_run("mixed-direct", session=runs)
    stored_analysis(run, session=runs)
    runs.commit()
    assert "analysis" in [name for run_id, name, _ in stored_rows(runs) if run_id == run.id]
    delete_run("mixed-direct", session=runs)
    runs.commit()
    assert [row for row in stored_rows(runs) if row[0] == run.id] == []


def test_parts_come_back_as_they_went_and_a_result_is_computed_once(runs: Session):
    parts = {
        "frame": pd.DataFrame({"a": [1.5, np.nan], "b": ["x", None]}),
        "array": np.arange(6, dtype=np.int8).reshape(2, 3),
        "figures": {"n": 3, "ci": [-1.5, 2.0]},
    }
    back = decode(encode(parts))
    pd.testing.assert_frame_equal(back["frame"], parts["frame"])
    assert back["array"].dtype == np.int8
    assert (back["array"] == parts["array"]).all()
    assert back["figures"] == parts["figures"]

    computed = []
    run = get_run("demo-pcf", session=runs)
    for _ in range(2):
        kept(run, "figures", lambda: computed.append(1) or {"figures": {"n": 1}}, session=runs)
    assert computed == [1]


def test_the_calibration_is_refitted_when_its_answers_change_not_at_every_label(db: Session):
    """The demo has gold: a label leaves the answers the judge is checked against as they were,
    so the calibration stored before it is read back, not fitted and written again."""
    run = get_run("demo-pcf", session=db)
    first = run_calibration(run, session=db)
    db.commit()
    (stored,) = stored_rows(db, "calibration")
    item_db_id = next(iter(item_db_ids(run.dataset_id, session=db).values()))
    save_label(item_db_id, session=db, actor=operator(), choice="none_correct", seen=None)
    db.commit()
    again = run_calibration(run, session=db)
    assert stored_rows(db, "calibration") == [stored]
    pd.testing.assert_series_equal(again, first)

    computed = []
    for inputs in ({"a": "x"}, {"a": "x"}, {"a": None}, {"a": "x"}):
        kept(run, "probe", lambda: computed.append(1) or {"n": 1}, session=db, inputs=inputs)
    assert len(computed) == 3  # once per change of the inputs
