"""The reliability gate: `pcf check` exits 0 when a run holds its thresholds and 1 when one fails,
and the pytest helper does the same against human gold."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from pcf.analysis.gate import assert_reliable
from pcf.analysis.results import run_decisions
from pcf.cli import app
from pcf.evaluation import cohen_kappa
from pcf.store import add_adjudication, get_run, load_items

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
    first, last = held.stdout.splitlines()
    assert first == f"order_unstable {unstable:.4f} <= {unstable:g} pass"
    assert json.loads(last)["passed"] is True

    over = check(
        "demo-strong-bias-pcf",
        *("--max-order-unstable", "1", "--max-position-driven", str(driven - 0.01)),
    )
    assert over.exit_code == 1, over.output
    *lines, last = over.stdout.splitlines()
    assert lines[1].endswith("FAIL")
    summary = json.loads(last)
    assert summary["passed"] is False
    assert [(c["figure"], c["value"], c["passed"]) for c in summary["checks"]] == [
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
    kappa = cohen_kappa([winners[i] for i in human], list(human.values()))

    checks = assert_reliable(run.name, min_accuracy=accuracy, min_kappa=kappa)
    assert [(c.figure, c.value) for c in checks] == [
        ("kappa", pytest.approx(kappa)),
        ("accuracy", pytest.approx(accuracy)),
    ]
    with pytest.raises(AssertionError, match=r"(?m)^accuracy .* FAIL$"):
        assert_reliable(run.name, min_accuracy=accuracy + 0.01)
