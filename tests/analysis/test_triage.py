"""Review triage (pcf/analysis/triage.py): error-capture and budget curves checked by hand,
random orders average to the diagonal, equal scores are averaged over their orders, the
calibrated priority is scored out of fold, and recorded pairwise judges are checked as a
single call."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest
from sqlmodel import Session
from statsmodels.genmod import families
from statsmodels.genmod.generalized_linear_model import GLM
from typer.testing import CliRunner

from pcf.analysis.results import run_decisions
from pcf.analysis.triage import (
    CHART_POINTS,
    RIDGE,
    _fit_predict,
    calibrated_priority,
    calibrated_scores,
    curve,
    curve_frame,
    doubt_curve,
    feature_matrix,
    pair_triage,
    random_baseline,
    reliability,
    run_triage,
)
from pcf.cli import app
from pcf.connectors.recordings import FIRST, SECOND, RecordedPair
from pcf.reports.charts import capture_chart
from pcf.store import get_run, load_items
from tests.shared_data import HAIKU, LLMBAR, O1_MINI

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
    priority = doubt_curve("priority", wrong, list(rng.random(10_000)))
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


@pytest.mark.parametrize("errors", [0, 20])
def test_the_random_band_at_the_chart_positions_is_that_of_every_draw_in_full(errors):
    """Each draw's whole curve, drawn here as the band's definition says, agrees with the band
    kept at the chart's positions alone (1,000 items: 401 of them)."""
    wrong = [i < errors for i in range(1_000)]
    baseline = random_baseline(wrong, seed=3)
    rng = np.random.default_rng(3)
    draws = np.array([np.cumsum(np.array(wrong)[rng.permutation(1_000)]) for _ in range(200)])
    full = np.hstack([np.zeros((200, 1)), draws]) / errors if errors else np.ones((200, 1_001))
    shown = [round(1_000 * share) for share in baseline["reviewed"]]
    assert len(shown) == CHART_POINTS + 1
    assert (shown[0], shown[-1]) == (0, 1_000)
    low, high = np.percentile(full[:, shown], (5, 95), axis=0)
    expected = {"mean": full[:, shown].mean(axis=0), "low": low, "high": high}
    for name, values in expected.items():
        assert baseline[f"captured_{name}"] == pytest.approx(values, rel=1e-12, abs=1e-15)
    assert baseline["capture_auc"] == pytest.approx(
        np.mean(np.trapezoid(full, np.arange(1_001) / 1_000, axis=1))
    )


def test_the_random_baseline_holds_one_draw_of_a_large_run_at_a_time():
    """200 draws over 200,000 items in well under the 160 MB all their curves would take."""
    wrong = list(np.random.default_rng(0).random(200_000) < 0.3)
    tracemalloc.start()
    try:
        random_baseline(wrong)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20e6


def test_equal_scores_are_reviewed_in_every_order_alike_and_unknown_last():
    """Scores 2 | 0.5 0.5 0.5 | 0.1 | NaN; errors at 2, at one of the three tied, and at the
    unknown one. Within the tie each item reviewed finds a third of its one error."""
    wrong = [False, True, True, True, False, False]
    scores = [0.1, np.nan, 2.0, 0.5, 0.5, 0.5]
    reviewed = doubt_curve("doubt", wrong, scores)
    assert (reviewed.captured * 3).tolist() == pytest.approx([0, 1, 4 / 3, 5 / 3, 2, 2, 3])
    assert reviewed.accuracy.tolist() == pytest.approx(
        [0.5, 4 / 6, 13 / 18, 14 / 18, 5 / 6, 5 / 6, 1]
    )
    # The listing order of the tied items does not move the curve.
    shuffled = doubt_curve("doubt", [wrong[i] for i in (0, 1, 2, 5, 4, 3)], scores)
    assert shuffled.captured.tolist() == pytest.approx(reviewed.captured.tolist())
    with pytest.raises(ValueError, match="one score per item"):
        doubt_curve("bad", wrong, scores[:5])


def test_pairs_are_triaged_against_the_single_calls_errors():
    pairs = [
        RecordedPair("p1", "b", FIRST, FIRST, FIRST),  # same verdict, right
        RecordedPair("p2", "b", FIRST, SECOND, SECOND),  # same verdict, wrong
        RecordedPair("p3", "b", FIRST, FIRST, SECOND),  # opposite: the single call is right
        RecordedPair("p4", "b", FIRST, SECOND, FIRST),  # opposite: the single call is wrong
        RecordedPair("p5", "b", SECOND, SECOND, "tie"),  # swapped call a tie, right
        RecordedPair("p6", "b", FIRST, "tie", FIRST),  # single call a tie: an abstention
        RecordedPair("p7", "b", FIRST, None, SECOND),  # no single verdict: an abstention
    ]
    figures = pair_triage(pairs)
    assert (figures["items"], figures["errors"], figures["abstentions"]) == (5, 2, 2)
    tiers = {t["tier"]: (t["pairs"], t["errors"]) for t in figures["tiers"]}
    # No tier is errors by construction: an opposite verdict is right as often as wrong here.
    assert tiers == {
        "opposite verdict": (2, 1),
        "swapped call tie or none": (1, 0),
        "same verdict": (2, 1),
    }
    swap = figures["orders"]["swap_disagreement"]
    # The opposite pair first, its error found halfway in (random order within the tier).
    assert swap["caught_at"]["20%"] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="no pair has a verdict"):
        pair_triage(pairs[5:])
    # Counted as errors, the two abstentions join the curves and are reviewed first.
    counted = pair_triage(pairs, abstentions="errors")
    assert (counted["items"], counted["errors"], counted["abstentions"]) == (7, 4, 2)
    assert counted["orders"]["swap_disagreement"]["caught_at"]["30%"] == pytest.approx(2 / 4)
    assert pair_triage(pairs[5:], abstentions="errors")["errors"] == 2


def test_a_runs_priority_curve_counts_the_judges_errors(db: Session):
    run = get_run("demo-pcf", session=db)
    curves, wrong, _ = run_triage(run, session=db, orders=["priority", "random"])
    gold = {i.item_id: i.gold for i in load_items(run.dataset_id, session=db)}
    decisions = run_decisions(run, session=db)
    errors = [d for d in decisions if d["winner"] != gold[d["item_id"]]]
    assert sum(wrong) == len(errors) == 13
    # Reviewed most doubtful first; at a tie on the 20% line, its share of errors pro rata.
    budget = len(decisions) // 5
    priority = [d["metrics"]["priority"] for d in decisions]
    line = sorted(priority, reverse=True)[budget - 1]
    above = [d for d in decisions if d["metrics"]["priority"] > line]
    tied = [d for d in decisions if d["metrics"]["priority"] == line]
    caught = sum(d["winner"] != gold[d["item_id"]] for d in above) + (budget - len(above)) * sum(
        d["winner"] != gold[d["item_id"]] for d in tied
    ) / len(tied)
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


@pytest.mark.parametrize("case", ["demo", "separable"])
def test_the_calibrated_model_is_statsmodels_ridge_glm(db: Session, case: str):
    _, wrong, table = run_triage(get_run("demo-pcf", session=db), session=db)
    x = feature_matrix(table)
    y = np.asarray(wrong, dtype=float)
    if case == "separable":  # one metric tells every error: an unpenalised fit has no optimum
        x[:, 0] = y
    train = np.arange(len(y)) % 3 != 0
    mean, scale = x[train].mean(axis=0), x[train].std(axis=0)
    scale[scale == 0] = 1.0  # a metric constant over the training rows
    design = np.column_stack([np.ones(len(y)), (x - mean) / scale])
    model = GLM(y[train], design[train], family=families.Binomial())
    fitted = model.fit_regularized(alpha=RIDGE, L1_wt=0.0)
    expected = model.predict(fitted.params, design[~train])
    # statsmodels' L-BFGS stops at a gradient of about 1e-5: on a flat (separable) objective its
    # probabilities lie up to 1e-4 from the exact optimum that Newton's method reaches.
    assert _fit_predict(x, y, train, ~train) == pytest.approx(expected, abs=3e-4)


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


def _replay_triage(*args: str) -> dict:
    result = runner.invoke(app, ["replay", *args, "--triage"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["triage"]


@pytest.mark.skipif(not O1_MINI.exists(), reason="../shared/data is absent")
def test_replay_triage_on_real_judges_against_their_single_calls():
    o1_mini = _replay_triage("judgebench", str(O1_MINI))
    # 350 pairs; 27 first-order calls are ties; 75 of the other 323 pick the wrong answer.
    assert (o1_mini["items"], o1_mini["errors"], o1_mini["abstentions"]) == (323, 75, 27)
    counted = _replay_triage("judgebench", str(O1_MINI), "--abstentions", "errors")
    assert (counted["items"], counted["errors"], counted["abstentions_counted"]) == (
        350,
        102,
        "errors",
    )
    # o1-mini: reviewing its swap-inconsistent pairs first finds its errors above chance.
    swap = o1_mini["orders"]["swap_disagreement"]["caught_at"]["20%"]
    assert swap > o1_mini["random"]["band_5_95"]["20%"][1]
    # claude-3-haiku: no signal, the order finds errors as a random one does.
    haiku = _replay_triage("judgebench", str(HAIKU))
    swap = haiku["orders"]["swap_disagreement"]["caught_at"]["20%"]
    low, high = haiku["random"]["band_5_95"]["20%"]
    assert low <= swap <= high
    gpt4 = _replay_triage("llmbar", str(LLMBAR), "--judge", "GPT-4", "--strategy", "Vanilla")
    swap = gpt4["orders"]["swap_disagreement"]["caught_at"]["20%"]
    assert swap > gpt4["random"]["band_5_95"]["20%"][1]


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
