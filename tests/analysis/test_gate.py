"""The reliability gate: `pcf check` exits 0 when a run holds its thresholds and 1 when one fails,
and the pytest helper does the same against human gold."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from pcf.analysis.agreement import table_human_comparison
from pcf.analysis.gate import assert_reliable
from pcf.analysis.results import run_decisions, stored_analysis
from pcf.cli import app
from pcf.labelling.human_gold import dataset_gold
from pcf.store import (
    add_adjudication,
    current_labels,
    get_dataset,
    get_engine,
    get_run,
    insert_calls,
    item_db_ids,
    load_items,
    session_scope,
)
from tests.factories import call_row, stored_run

runner = CliRunner()


def check(*args: str):
    return runner.invoke(app, ["check", *args])


def test_check_exits_0_within_its_thresholds_and_1_over_one(db):
    decisions = run_decisions(get_run("demo-strong-bias-pcf", session=db), session=db)
    unstable = sum("order_unstable" in d["flags"] for d in decisions) / len(decisions)
    driven = sum("position_driven" in d["flags"] for d in decisions) / len(decisions)
    assert 0.1 < driven < unstable < 1

    held = check("demo-strong-bias-pcf", "--max-order-unstable", str(unstable))
    assert held.exit_code == 0, held.output
    failed, incomplete, first, last = held.stdout.splitlines()
    assert failed == "failed_calls 0.0000 <= 0.05 pass (n=1092 calls)"
    assert incomplete == "incomplete 0.0000 <= 0.05 pass (n=52 items)"
    assert first == f"order_unstable {unstable:.4f} <= {unstable:g} pass (n=52 items)"
    assert json.loads(last)["passed"] is True

    over = check(
        "demo-strong-bias-pcf",
        *("--max-order-unstable", "1", "--max-position-driven", str(driven - 0.01)),
    )
    assert over.exit_code == 1, over.output
    *lines, last = over.stdout.splitlines()
    assert lines[3].endswith("FAIL (n=52 items)")
    summary = json.loads(last)
    assert summary["passed"] is False
    assert [(c["figure"], c["value"], c["passed"]) for c in summary["checks"]] == [
        ("failed_calls", 0.0, True),
        ("incomplete", 0.0, True),
        ("order_unstable", pytest.approx(unstable), True),
        ("position_driven", pytest.approx(driven), False),
    ]

    no_gold = check("demo-strong-bias-pcf", "--min-kappa", "0.2")
    assert no_gold.exit_code == 2
    assert "human gold" in no_gold.stderr


def test_the_pytest_helper_measures_kappa_and_accuracy_against_human_gold(db):
    run = get_run("demo-strong-bias-pcf", session=db)
    items = load_items(run.dataset_id, session=db)[:20]
    # The person picks the gold answer on the first 15 items and the first other one after.
    human = {
        i.item_id: i.gold if n < 15 else next(c for c in i.candidate_ids if c != i.gold)
        for n, i in enumerate(items)
    }
    for item in items:
        add_adjudication(
            item.metadata["db_id"], session=db, annotator="ann", choice=human[item.item_id]
        )
    db.commit()
    winners = {d["item_id"]: d["winner"] for d in run_decisions(run, session=db)}
    accuracy = sum(winners[i] == h for i, h in human.items()) / len(human)
    chance = sum(1 / len(i.candidate_ids) for i in items) / len(items)
    kappa = (accuracy - chance) / (1 - chance)

    checks = assert_reliable(run.name, min_accuracy=accuracy, min_kappa=kappa)
    assert [(c.figure, c.value) for c in checks] == [
        ("kappa", pytest.approx(kappa)),
        ("accuracy", pytest.approx(accuracy)),
    ]
    with pytest.raises(AssertionError, match=r"(?m)^accuracy .* FAIL \(n=20 items\)$"):
        assert_reliable(run.name, min_accuracy=accuracy + 0.01)


def test_a_run_whose_calls_failed_fails_the_gate_and_one_judgment_measures_no_order(
    isolated_database, tmp_path
):
    """1,300 of 1,400 calls failed: items with one judgment or none were counted stable."""
    items = tmp_path / "items.jsonl"
    rows = [
        {
            "item_id": f"q{i:03d}",
            "prompt": f"Question {i}?",
            "gold": "c0",
            "bucket": None,
            "candidates": [{"id": "c0", "text": "Right."}, {"id": "c1", "text": "Wrong."}],
        }
        for i in range(200)
    ]
    items.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert runner.invoke(app, ["import", "jsonl", str(items), "--name", "d"]).exit_code == 0
    with session_scope(get_engine()) as session:
        dataset = get_dataset("d", session=session)
        run = stored_run(session, dataset.id, name="failing", k=7)
        ids = item_db_ids(dataset.id, session=session)
        # The first 100 items keep one ok call (call 0), every other call failed.
        calls = [
            call_row(run.id, ids[f"q{i:03d}"], c)
            if c == 0 and i < 100
            else call_row(run.id, ids[f"q{i:03d}"], c, ok=False, judgment=None)
            for i in range(200)
            for c in range(7)
        ]
        insert_calls(calls, session=session)

    result = check("failing", "--max-order-unstable", "0", "--max-position-driven", "0")
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    assert lines[:2] == [
        "failed_calls 0.9286 <= 0.05 FAIL (n=1400 calls)",
        "incomplete 1.0000 <= 0.05 FAIL (n=200 items)",
    ]
    # An item with one judgment is neither stable nor unstable: no figure, which fails.
    assert lines[2:4] == [
        "order_unstable undefined <= 0 FAIL (n=0 items)",
        "position_driven undefined <= 0 FAIL (n=0 items)",
    ]
    assert "NaN" not in result.stdout
    assert "Infinity" not in result.stdout
    assert json.loads(lines[-1])["checks"][0]["value"] == pytest.approx(1300 / 1400)

    lenient = check("failing", "--max-failed", "1", "--max-order-unstable", "1", "--min-items", "1")
    assert lenient.exit_code == 1, lenient.output  # still no item to measure order on


def test_renaming_every_candidate_changes_no_agreement_figure(isolated_database, tmp_path):
    """The same judge and people on two copies of a dataset, one with ids shared by every item
    (c0, c1, c2) and one with each item's own ids: `pcf check` and Compare's figures agree."""
    names = {"shared": lambda i, c: f"c{c}", "own": lambda i, c: f"q{i}-{c * 7919 % 97}"}
    figures = {}
    for dataset, name in names.items():
        rows = [
            {
                "item_id": f"q{i}",
                "prompt": f"Question {i}?",
                "gold": None,
                "bucket": None,
                "candidates": [{"id": name(i, c), "text": f"Answer {c}."} for c in range(3)],
            }
            for i in range(30)
        ]
        path = tmp_path / f"{dataset}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        assert runner.invoke(app, ["import", "jsonl", str(path), "--name", dataset]).exit_code == 0
        with session_scope(get_engine()) as session:
            found = get_dataset(dataset, session=session)
            ids = item_db_ids(found.id, session=session)
            run = stored_run(session, found.id, name=f"{dataset}-run", k=2)
            calls = []
            for i in range(30):
                order = [name(i, c) for c in range(3)]
                top = order[i % 3 if i % 4 else 0]  # the judge picks answer 0 on most items
                ranking = [top, *(c for c in order if c != top)]
                judged = {
                    "factuality": {c: 9.0 if c == top else 2.0 for c in order},
                    "hallucination_risk": dict.fromkeys(order, 0.2),
                    "ranking": ranking,
                    "confidence": 0.9,
                }
                calls += [
                    call_row(
                        run.id,
                        ids[f"q{i}"],
                        k,
                        order=order,
                        keys=["A", "B", "C"],
                        judgment=judged,
                        content_key=f"{dataset}-{i}-{k}",
                    )
                    for k in range(2)
                ]
            insert_calls(calls, session=session)
            for i in range(30):  # ann answers 0, bob too but on every fourth item
                for person, c in (("ann", 0), ("bob", 0 if i % 4 else 1 + i % 2)):
                    add_adjudication(
                        ids[f"q{i}"], session=session, annotator=person, choice=name(i, c)
                    )
        result = check(f"{dataset}-run", "--min-kappa", "-1", "--min-accuracy", "0")
        assert result.exit_code == 0, result.output
        values = [
            (c["figure"], c["value"], c["n"])
            for c in json.loads(result.stdout.splitlines()[-1])["checks"]
        ]
        with session_scope(get_engine()) as session:
            run = get_run(f"{dataset}-run", session=session)
            compared = table_human_comparison(
                stored_analysis(run, session=session).table,
                current_labels(run.dataset_id, session=session),
                dataset_gold(run.dataset_id, session=session).gold,
            )
        figures[dataset] = (values, compared.direct, compared.pcf, compared.agreement)
    assert figures["shared"] == figures["own"]
    kappa = figures["own"][0][2][1]
    assert -1 < kappa < 1
