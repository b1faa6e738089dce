"""Review triage (pcf/analysis/triage.py): error-capture and budget curves checked by hand,
random orders average to the diagonal, the calibrated priority is scored out of fold."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sqlmodel import Session
from typer.testing import CliRunner

from pcf.analysis.results import run_decisions
from pcf.analysis.triage import (
    CHART_POINTS,
    calibrated_priority,
    calibrated_scores,
    curve,
    curve_frame,
    most_doubtful_first,
    pair_scores,
    pair_wrong,
    random_baseline,
    reliability,
    run_triage,
)
from pcf.cli import app
from pcf.recordings import FIRST, SECOND, RecordedPair
from pcf.reports.charts import capture_chart
from pcf.store import get_run, load_items
from tests.shared_data import O1_MINI

runner = CliRunner()


def test_the_curves_by_hand():
    wrong = [True, False, True, False, False]
    reviewed = curve("hand", wrong, [2, 0, 1, 3, 4])
    assert reviewed.reviewed.tolist() == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert reviewed.captured.tolist() == [0, 0.5, 1, 1, 1, 1]
    assert reviewed.accuracy.tolist() == pytest.approx([0.6, 0.8, 1, 1, 1, 1])
    # Trapezoids: 0.2 * (0.25 + 0.75 + 1 + 1 + 1) = 0.8.
    assert reviewed.capture_auc == pytest.approx(0.8)
    assert (reviewed.at(0.2), reviewed.at(0.39), reviewed.at(0.4)) == (0.5, 0.5, 1.0)
    worst = curve("worst", wrong, [1, 3, 4, 0, 2])
    assert worst.captured.tolist() == [0, 0, 0, 0, 0.5, 1]
    with pytest.raises(ValueError, match="every item once"):
        curve("bad", wrong, [0, 0, 1, 2, 3])


def test_the_chart_of_ten_thousand_items_is_thinned_to_exact_points():
    rng = np.random.default_rng(3)
    wrong = list(rng.random(10_000) < 0.2)
    priority = curve("priority", wrong, most_doubtful_first(list(rng.random(10_000))))
    frame = curve_frame([priority], wrong)
    mine = frame[frame["order"] == "priority"]
    assert len(frame) == 2 * (CHART_POINTS + 1)
    assert (mine["reviewed"].iloc[0], mine["reviewed"].iloc[-1]) == (0.0, 1.0)
    steps = (mine["reviewed"] * 10_000).round().astype(int)
    assert list(mine["captured"]) == list(priority.captured[steps])
    capture_chart(frame).to_dict()  # within Altair's 5,000 rows


def test_random_orders_average_to_the_diagonal():
    wrong = [i % 3 == 0 for i in range(60)]
    baseline = random_baseline(wrong, seed=3)
    assert baseline["captured_mean"] == pytest.approx(baseline["reviewed"], abs=0.04)
    assert baseline["capture_auc"] == pytest.approx(0.5, abs=0.02)
    assert (baseline["captured_low"] <= baseline["captured_mean"]).all()
    assert (baseline["captured_mean"] <= baseline["captured_high"]).all()


def test_the_most_doubtful_come_first_unknown_last_ties_seeded():
    order = most_doubtful_first([0.1, np.nan, 2.0, 0.5, 0.5])
    assert order[0] == 2
    assert set(order[1:3]) == {3, 4}
    assert order[3:] == [0, 1]
    assert order == most_doubtful_first([0.1, np.nan, 2.0, 0.5, 0.5])


def test_swap_disagreement_scores_and_the_official_errors():
    pairs = [
        RecordedPair("p1", "b", FIRST, FIRST, FIRST),  # agree, right
        RecordedPair("p2", "b", FIRST, SECOND, SECOND),  # agree, wrong
        RecordedPair("p3", "b", FIRST, FIRST, SECOND),  # opposite verdicts: no decision
        RecordedPair("p4", "b", SECOND, "tie", SECOND),  # one decisive: it decides, right
        RecordedPair("p5", "b", FIRST, "tie", None),  # neither decisive
    ]
    assert pair_scores(pairs).tolist() == [0, 0, 3, 2, 1]
    assert pair_wrong(pairs) == [False, True, True, False, True]


def test_a_runs_priority_curve_counts_the_judges_errors(db: Session):
    run = get_run("demo-pcf", session=db)
    curves, wrong, _ = run_triage(run, session=db, orders=["priority", "random"])
    gold = {i.item_id: i.gold for i in load_items(run.dataset_id, session=db)}
    decisions = run_decisions(run, session=db)
    errors = [d for d in decisions if d["winner"] != gold[d["item_id"]]]
    assert sum(wrong) == len(errors) == 13
    by_priority = sorted(decisions, key=lambda d: -d["metrics"]["priority"])
    first_fifth = by_priority[: len(decisions) // 5]
    caught = sum(d["winner"] != gold[d["item_id"]] for d in first_fifth)
    assert curves[0].at(0.2) == pytest.approx(caught / len(errors))
    assert curves[0].capture_auc > curves[1].capture_auc


def test_the_calibrated_priority_is_scored_out_of_fold(db: Session):
    run = get_run("demo-pcf", session=db)
    _, wrong, table = run_triage(run, session=db)
    scores = calibrated_scores(table, wrong, seed=1)
    assert scores.shape == (len(wrong),)
    assert ((scores >= 0) & (scores <= 1)).all()
    assert scores[np.array(wrong)].mean() > scores[~np.array(wrong)].mean()
    diagram = reliability(scores, wrong)
    assert diagram["items"].sum() == len(wrong)
    with pytest.raises(ValueError, match="two right and two wrong"):
        calibrated_scores(table, [False] * (len(wrong) - 1) + [True])


def test_pcf_triage_prints_the_figures_and_writes_the_chart(demo_engine, tmp_path):
    result = runner.invoke(
        app,
        ["triage", "demo-pcf", "--by", "priority", "--by", "calibrated", "--out", str(tmp_path)],
    )
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    assert set(figures["orders"]) == {"priority", "calibrated"}
    assert figures["random"]["caught_at"]["20%"] == pytest.approx(0.2, abs=0.03)
    assert (tmp_path / "triage.png").read_bytes().startswith(b"\x89PNG")
    assert len(figures["reliability"]) >= 1
    unknown = runner.invoke(app, ["triage", "demo-pcf", "--by", "vibes"])
    assert unknown.exit_code == 2


@pytest.mark.skipif(not O1_MINI.exists(), reason="../shared/data is absent")
def test_replay_triage_on_a_real_judge():
    result = runner.invoke(app, ["replay", "judgebench", str(O1_MINI), "--triage"])
    assert result.exit_code == 0, result.output
    triage = json.loads(result.stdout)["triage"]
    # JudgeBench's official score of o1-mini: 230 correct, 39 incorrect, 81 ties of 350.
    assert (triage["items"], triage["errors"]) == (350, 120)
    swap = triage["orders"]["swap_disagreement"]
    assert swap["caught_at"]["20%"] > 2 * triage["random"]["caught_at"]["20%"]


def test_the_calibrated_order_scores_every_item_and_labelled_ones_out_of_fold(db: Session):
    run = get_run("demo-pcf", session=db)
    _, _, known = run_triage(run, session=db)
    gold = dict(zip(known["item_id"], known["gold"], strict=True))
    some = dict(list(gold.items())[:30])  # the other 22 items have no answer yet
    scores = calibrated_priority(known, some, seed=2)
    assert list(scores.index) == list(known["item_id"])
    assert ((scores >= 0) & (scores <= 1)).all()
    labelled = known[known["item_id"].isin(list(some))]
    out_of_fold = calibrated_scores(labelled, list(labelled["wrong"]), seed=2)
    assert scores[list(labelled["item_id"])].tolist() == pytest.approx(out_of_fold.tolist())
