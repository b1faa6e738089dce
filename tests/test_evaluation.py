"""Evaluation statistics against hand-computed values."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binom, binomtest

from pcf.analysis.results import interval, p_value
from pcf.evaluation import (
    accuracy,
    chance_corrected,
    compare_paired,
    exact_interval,
    mcnemar_exact,
    paired_bootstrap_ci,
    paired_outcomes,
    rater_agreement,
)
from pcf.reports.render import MISSING, display_frame
from pcf.reports.tables import main_table


def test_accuracy_counts_abstentions_as_wrong():
    assert accuracy(["a", "b", None, "a"], ["a", "a", "b", "a"]) == 0.5
    assert accuracy(["x"], ["x"]) == 1.0
    with pytest.raises(ValueError, match="lengths differ"):
        accuracy(["a"], ["a", "b"])
    with pytest.raises(ValueError, match="nothing"):
        accuracy([], [])


def test_paired_outcomes_by_hand():
    direct = [True, True, False, False, False, True]
    method = [True, False, True, True, False, True]
    assert paired_outcomes(direct, method) == {
        "improved": 2,
        "regressed": 1,
        "same": 3,
        "both_right": 2,
        "both_wrong": 1,
    }


@pytest.mark.parametrize(
    ("improved", "regressed", "expected"),
    [
        (10, 2, 2 * (1 + 12 + 66) / 2**12),  # 2 * P(X <= 2), X ~ Bin(12, 1/2)
        (5, 0, 2 / 2**5),
        (0, 5, 2 / 2**5),
        (4, 2, 2 * (1 + 6 + 15) / 2**6),
        (3, 3, 1.0),
        (0, 0, 1.0),
    ],
)
def test_mcnemar_exact_hand_values(improved, regressed, expected):
    assert mcnemar_exact(improved, regressed) == pytest.approx(expected)


def test_mcnemar_agrees_with_scipy_binomtest():
    for improved, regressed in itertools.product(range(13), repeat=2):
        if improved + regressed == 0:
            continue
        scipy_p = binomtest(min(improved, regressed), improved + regressed, 0.5).pvalue
        assert mcnemar_exact(improved, regressed) == pytest.approx(scipy_p)


def test_mcnemar_rejects_negative_counts():
    with pytest.raises(ValueError, match="non-negative"):
        mcnemar_exact(-1, 2)


def test_bootstrap_degenerate_cases_by_hand():
    assert paired_bootstrap_ci([True, False] * 5, [True, False] * 5) == (0.0, 0.0)
    assert paired_bootstrap_ci([False] * 8, [True] * 8) == (1.0, 1.0)
    assert paired_bootstrap_ci([True] * 8, [False] * 8) == (-1.0, -1.0)


def test_bootstrap_is_seeded_and_brackets_the_estimate():
    rng = np.random.default_rng(7)
    direct = rng.random(150) < 0.6
    method = np.where(rng.random(150) < 0.2, ~direct, direct)
    first = paired_bootstrap_ci(direct, method, seed=1)
    assert first == paired_bootstrap_ci(direct, method, seed=1)
    # Quantiles sit on a lattice of 1/n, so only few replicates show the seed at work.
    small = {paired_bootstrap_ci(direct, method, n_boot=40, seed=s) for s in range(5)}
    assert len(small) > 1
    estimate = method.mean() - direct.mean()
    assert first[0] <= estimate <= first[1]
    narrow = paired_bootstrap_ci(direct, method, seed=1, level=0.5)
    assert first[0] <= narrow[0] <= narrow[1] <= first[1]


def test_bootstrap_matches_resampling_item_indices():
    """The multinomial shortcut has the distribution of resampling items with replacement."""
    rng = np.random.default_rng(11)
    n = 120
    direct = rng.random(n) < 0.55
    method = np.where(rng.random(n) < 0.3, rng.random(n) < 0.7, direct)
    indices = np.random.default_rng(0).integers(0, n, size=(20000, n))
    naive = method[indices].mean(axis=1) - direct[indices].mean(axis=1)
    naive_ci = np.quantile(naive, [0.025, 0.975])
    low, high = paired_bootstrap_ci(direct, method, n_boot=20000, seed=3)
    assert low == pytest.approx(naive_ci[0], abs=0.01)
    assert high == pytest.approx(naive_ci[1], abs=0.01)


def test_bootstrap_rejects_bad_settings():
    with pytest.raises(ValueError, match="n_boot"):
        paired_bootstrap_ci([True], [True], n_boot=0)
    with pytest.raises(ValueError, match="level"):
        paired_bootstrap_ci([True], [True], level=1.0)


def test_compare_paired_by_hand():
    gold = ["a"] * 10
    # direct right on items 0-5 (item 6 abstains); method right on items 0-3 and 6-9.
    direct = ["a"] * 6 + [None] + ["b"] * 3
    method = ["a"] * 4 + ["b"] * 2 + ["a"] * 4
    result = compare_paired(gold, direct, method)
    assert result["n"] == 10
    assert result["direct_accuracy"] == 0.6
    assert result["method_accuracy"] == 0.8
    assert result["delta_points"] == pytest.approx(20.0)
    assert (result["improved"], result["regressed"], result["same"]) == (4, 2, 4)
    assert (result["both_right"], result["both_wrong"]) == (4, 0)
    assert (result["direct_abstentions"], result["method_abstentions"]) == (1, 0)
    assert result["mcnemar_p"] == pytest.approx(2 * (1 + 6 + 15) / 2**6)
    low, high = result["ci_points"]
    assert low <= 20.0 <= high
    assert result["ci_points"] == compare_paired(gold, direct, method)["ci_points"]
    assert result["usable_pairs"] == 10


def test_a_paired_statistic_on_no_usable_pair_is_undefined_not_p_1():
    """Five items both protocols abstained on (a small model that never answered in JSON):
    nothing is known about the difference, so neither McNemar's p nor its interval is 1.0 or
    [0, 0]; one decided item makes them defined again."""
    abstained = compare_paired(["a"] * 5, [None] * 5, [None] * 5)
    assert (abstained["usable_pairs"], abstained["mcnemar_p"], abstained["ci_points"]) == (
        0,
        None,
        None,
    )
    assert (p_value(abstained["mcnemar_p"]), interval(abstained["ci_points"])) == (
        "undefined",
        "undefined",
    )
    table = main_table(
        pd.DataFrame({"protocol": ["pcf"], "model": ["m"], "run": ["r"]}),
        pd.DataFrame(
            {"run": ["r"] * 5, "item_id": list("vwxyz"), "gold": ["a"] * 5}
            | {"winner": [None] * 5, "direct_winner": [None] * 5}
        ),
    )
    assert (
        display_frame(table)[["McNemar p", "CI low", "CI high"]].iloc[0].tolist() == [MISSING] * 3
    )
    decided = compare_paired(["a"] * 5, ["a", *[None] * 4], [None] * 5)
    assert decided["usable_pairs"] == 1
    assert p_value(decided["mcnemar_p"]) == "1"
    assert interval(decided["ci_points"]) != "undefined"


def test_compare_paired_requires_gold():
    with pytest.raises(ValueError, match="gold id"):
        compare_paired(["a", None], ["a", "b"], ["a", "b"])


def test_exact_interval_by_the_binomial_tails():
    """Clopper-Pearson: at ``low``, 7 or more of 20 has chance 2.5%; at ``high``, 7 or fewer."""
    low, high = exact_interval(7, 20)
    assert binom.sf(6, 20, low) == pytest.approx(0.025)
    assert binom.cdf(7, 20, high) == pytest.approx(0.025)
    assert exact_interval(0, 10)[0] == 0.0
    assert exact_interval(10, 10)[1] == 1.0


def test_chance_corrected_agreement_by_hand():
    """Chance is one over each item's candidates: 3 of 4 right on items of 2, 2, 4 and 4
    candidates is (0.75 - 0.375) / 0.625 = 0.6."""
    figure = chance_corrected([1, 1, 0, 1], [2, 2, 4, 4])
    assert (figure.n, figure.share, figure.chance) == (4, 0.75, 0.375)
    assert figure.kappa == pytest.approx(0.6)
    assert figure.low < 0.75 < figure.high
    assert chance_corrected([1, 0], [1, 1]).kappa is None  # one candidate: chance is 1
    # Between people: per item the share of agreeing pairs (a, a, b: one pair of three).
    people = rater_agreement([["a", "a", "b"], ["x", "x"]], [3, 3])
    assert people.share == pytest.approx((1 / 3 + 1) / 2)
    assert people.kappa == pytest.approx((2 / 3 - 1 / 3) / (2 / 3))
    with pytest.raises(ValueError, match="two choices"):
        rater_agreement([["a"]], [2])
